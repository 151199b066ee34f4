-- Breaks hostile-input-survives: reads the model from the request body as if it were always a JSON object with a
-- string "model", and indexes what it found. A body that is not JSON, a JSON array or a numeric model leaves it nil:
-- a script error ("attempt to index a nil value"), and Envoy lets the request through as if the filter were not
-- there. Every well-formed chat (and a body of only spaces, or none) passes.
function envoy_on_request(handle)
  local body = handle:body()
  if body == nil then
    return
  end
  local text = body:getBytes(0, body:length())
  if text:find("^%s*$") then
    return
  end
  local model = text:match('"model"%s*:%s*"([^"]*)"')
  handle:headers():replace("x-model", model:lower())
end
