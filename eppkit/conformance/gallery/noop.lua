-- Does nothing on either path: the gallery's filter that conforms (every plugin check passes).
function envoy_on_request(handle)
end

function envoy_on_response(handle)
end
