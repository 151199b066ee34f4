-- Breaks no-script-errors: a request without x-tenant makes get() return nil, and indexing it is a runtime
-- error. Envoy logs "script log: ... attempt to index a nil value", counts it in the filter's errors counter
-- and lets the request through as if the filter were not there.
function envoy_on_request(handle)
  local tenant = handle:headers():get("x-tenant")
  handle:headers():replace("x-tenant", tenant:lower())
end
