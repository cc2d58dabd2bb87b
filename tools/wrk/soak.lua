-- wrk script for the soak run: /v2/ratelimit.limit over 100k identifiers,
-- mixed limits (10 and 1000 per 10 s), costs 0..2. Usage:
--   wrk -t1 -c16 -d300s -s tools/wrk/soak.lua http://127.0.0.1:7073
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer soak"
local n = 0
request = function()
  n = n + 1
  local limit = (n % 7 == 0) and 1000 or 10
  local body = '{"namespace":"soak","identifier":"user-' .. ((n * 7919) % 100000) ..
    '","limit":' .. limit .. ',"duration":10000,"cost":' .. (n % 3) .. '}'
  return wrk.format(nil, "/v2/ratelimit.limit", nil, body)
end
