-- Breaks memory-bounded: every request appends 32 KiB of its own (a string no other request shares) to a global
-- table that is never emptied, so Envoy's memory grows by 32 KiB a request for as long as it runs: 2,000 requests
-- hold 64 MiB. A cache without a bound, a per-request log kept "for later": the same leak.
leaked = {}

function envoy_on_request(handle)
  leaked[#leaked + 1] = #leaked .. string.rep("x", 32 * 1024)
end
