function envoy_on_request(handle)
  local x = = 1
end
