-- Breaks refusals-are-clean: an auth gate that refuses a request without x-tenant with a bare 403 and the words
-- "forbidden: no x-tenant" as plain text (no content-type, no JSON): an OpenAI client cannot read it. Envoy records
-- it as a local reply, response code details lua_response. Judge it with --plugin-let-through 'x-tenant: acme'.
function envoy_on_request(handle)
  if handle:headers():get("x-tenant") == nil then
    handle:respond({[":status"] = "403"}, "forbidden: no x-tenant")
  end
end
