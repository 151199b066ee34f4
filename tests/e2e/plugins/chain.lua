-- A test filter for eppkit's own e2e tests: it reports where in the chain it ran.
-- On the request it appends its name to x-user-chain and notes the endpoint the picker chose
-- so far (x-gateway-destination-endpoint); on the response it hands both back to the client in
-- x-user-<name>-chain and x-user-<name>-endpoint. Its name comes from EPPKIT_CONFIG (set by
-- eppkit when the filter has a config), else "plain".
local name = (EPPKIT_CONFIG or {}).name or "plain"

function envoy_on_request(handle)
  local headers = handle:headers()
  local chain = headers:get("x-user-chain")
  chain = chain and (chain .. "," .. name) or name
  headers:replace("x-user-chain", chain)
  local meta = handle:streamInfo():dynamicMetadata()
  meta:set("user." .. name, "chain", chain)
  meta:set("user." .. name, "endpoint", headers:get("x-gateway-destination-endpoint") or "none")
end

function envoy_on_response(handle)
  local seen = handle:streamInfo():dynamicMetadata():get("user." .. name) or {}
  handle:headers():add("x-user-" .. name .. "-chain", seen.chain or "?")
  handle:headers():add("x-user-" .. name .. "-endpoint", seen.endpoint or "?")
end
