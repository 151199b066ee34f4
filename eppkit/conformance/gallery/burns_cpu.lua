-- Breaks cost-within-budget: every request builds strings until the filter has used 2 ms of CPU (os.clock: the
-- process's CPU time), on the request path, before Envoy may start the upstream: each request 2-3 ms later. A
-- streamed answer keeps its pace (the 2 ms come before the first token, well within streaming-preserved's 5 ms).
function envoy_on_request(handle)
  local started, parts = os.clock(), {}
  while os.clock() - started < 0.002 do
    parts[#parts + 1] = string.rep("y", 64) .. #parts
    if #parts > 4096 then parts = {} end
  end
end
