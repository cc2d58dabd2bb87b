-- wrk script: POST /v2/ratelimit.limit over 10 identifiers at a limit of 100
-- per minute, keep-alive: every identifier is far over its limit after its
-- first 100 requests (the flood of docs/benchmarks/redis.md). Used by
-- scripts/flood.sh.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer load"
local n = 0
request = function()
  n = n + 1
  local body = '{"namespace":"flood","identifier":"attacker-' .. (n % 10) ..
    '","limit":100,"duration":60000}'
  return wrk.format(nil, "/v2/ratelimit.limit", nil, body)
end
