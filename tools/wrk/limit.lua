-- wrk script: POST /v2/ratelimit.limit over 1000 identifiers, limit 100 per
-- minute, keep-alive. Usage (server on the embedded default):
--   wrk -t1 -c32 -d10s --latency -s tools/wrk/limit.lua http://127.0.0.1:7070
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer load"
local n = 0
request = function()
  n = n + 1
  local body = '{"namespace":"load","identifier":"user-' .. (n % 1000) ..
    '","limit":100,"duration":60000}'
  return wrk.format(nil, "/v2/ratelimit.limit", nil, body)
end
