-- Breaks bodies-byte-for-byte: the whole request body read and written back with its 16,385th byte changed (the
-- first byte past a 16 KiB slice; the same length): what a filter that patches a buffer one byte off does to it.
-- Bodies of 16 KiB or less pass unchanged, and one that says it is no longer is not read at all (what it costs a
-- request is not this filter's fault to show).
function envoy_on_request(handle)
  local length = tonumber(handle:headers():get("content-length") or "")
  if length ~= nil and length <= 16384 then
    return
  end
  local body = handle:body()
  if body ~= nil and body:length() > 16384 then
    local bytes = body:getBytes(0, body:length())
    local changed = bytes:sub(16385, 16385) == "y" and "z" or "y"
    body:setBytes(bytes:sub(1, 16384) .. changed .. bytes:sub(16386))
  end
end
