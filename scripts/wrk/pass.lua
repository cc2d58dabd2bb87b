-- wrk script: POST /v2/ratelimit.limit over 1000 identifiers with a limit
-- of 1,000,000 per minute, so every request passes, keep-alive. It measures
-- what passing traffic far from its limits costs the origin. Usage:
--   SCRIPT=scripts/wrk/pass.lua scripts/flood.sh 3 8
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer load"
local n = 0
request = function()
  n = n + 1
  local body = '{"namespace":"pass","identifier":"user-' .. (n % 1000) ..
    '","limit":1000000,"duration":60000}'
  return wrk.format(nil, "/v2/ratelimit.limit", nil, body)
end
