-- External-callout endpoint picking for Envoy's Lua filter (Envoy 1.40, LuaJIT).
--
-- For each POST request: wait for the whole body, send it to the callout routing service
-- (POST /pick, docs/CONTRACTS.md "Callout service") with request_handle:httpCall, and put
-- the endpoint it answers (and its fallbacks, comma-separated) in the dynamic metadata
-- envoy.lb / x-gateway-destination-endpoint and the request header of the same name, as the
-- GAIE EPP protocol has it: the "picked" route matches on the metadata and its override_host
-- cluster tries the list in order. Other methods (GET /v1/models, /health) are not picked and
-- take the route's round-robin pool.
--
-- Outcomes:
--   callout 200 with an endpoint      -> metadata and header set, route cache cleared, request goes on;
--       in the disaggregated flows the answer's x-prefiller-host-port and x-encoder-hosts-ports
--       headers (the picked prefiller and encoders) are copied onto the request for the
--       pd-sidecar, as llm-d passes them
--   callout 4xx/5xx with JSON (its own 400/429/503) -> that answer goes to the client as is
--   callout unreachable, timed out, or answering garbage:
--       failure_mode_allow = true  -> request goes on without a pick (round-robin pool)
--       failure_mode_allow = false -> 502 OpenAI-style error, code "callout_unavailable"
-- The client sees which happened in the response header x-eppkit-callout
-- ("picked <host:port>" or "fail-open: <why>").
--
-- Trace context: Envoy 1.40's httpCall gives the call a child span of the request's
-- active span ("async <cluster> egress") and injects that span's traceparent into the
-- call's headers, so callout.pick joins the request's trace with no help from this
-- script (see docs/modes-callout.md for how that was established).
--
-- Configuration: an optional global table set before this file is loaded (the testbed
-- prepends it to the inline source):
--   EPPKIT_CALLOUT = { cluster = "callout", authority = "callout", timeout_ms = 1000,
--                      failure_mode_allow = false }

-- Chosen by the callout with the decoder (pd / epd / ttft flows); only the callout names them.
local STAGE_HEADERS = { "x-prefiller-host-port", "x-encoder-hosts-ports" }
local MODEL_HEADER = "x-gateway-model-name"
local STATUS_HEADER = "x-eppkit-callout"
local METADATA_NAMESPACE = "eppkit.callout"

local config = EPPKIT_CALLOUT or {}
-- The GAIE EPP protocol's names (eppkit/modes/lua_callout.py passes the picker core's).
local DESTINATION_HEADER = config.destination_header or "x-gateway-destination-endpoint"
local LB_METADATA = config.lb_metadata or "envoy.lb"
-- More client headers forwarded to the callout like the kit's x-eppkit-* ones (GAIE's
-- test-epp-endpoint-selection).
local FORWARD_HEADERS = {}
for _, name in ipairs(config.forward_headers or {}) do
  FORWARD_HEADERS[name:lower()] = true
end
local CLUSTER = config.cluster or "callout"
local AUTHORITY = config.authority or CLUSTER
local TIMEOUT_MS = config.timeout_ms or 1000
local FAIL_OPEN = config.failure_mode_allow == true

-- The picked cluster's endpoints are IP literals with a port (no host names).
local function valid_endpoint(value)
  if type(value) ~= "string" then
    return false
  end
  return value:match("^%d+%.%d+%.%d+%.%d+:%d+$") ~= nil or value:match("^%[[%x:.]+%]:%d+$") ~= nil
end

-- A comma-separated list of endpoints, every one valid (x-encoder-hosts-ports).
local function valid_endpoint_list(value)
  if type(value) ~= "string" or value == "" then
    return false
  end
  for item in (value .. ","):gmatch("([^,]*),") do
    if not valid_endpoint((item:gsub("^%s+", ""):gsub("%s+$", ""))) then
      return false
    end
  end
  return true
end

-- Copy the prefiller / encoders the callout chose onto the request (absent: nothing to copy).
local function copy_stage_headers(handle, response_headers)
  for _, name in ipairs(STAGE_HEADERS) do
    local value = response_headers[name]
    if value ~= nil and valid_endpoint_list(value) then
      handle:headers():replace(name, value)
    elseif value ~= nil then
      handle:logWarn("callout answered an unusable " .. name .. ": " .. tostring(value))
    end
  end
end

-- OpenAI-style errors (the same shape as services/openai_errors.py).
local function json_quote(s)
  return '"'
    .. s:gsub('[%c"\\]', function(c)
      if c == '"' then
        return '\\"'
      elseif c == "\\" then
        return "\\\\"
      end
      return string.format("\\u%04x", c:byte())
    end)
    .. '"'
end

local function respond_callout_unavailable(handle, why)
  local body = string.format(
    '{"error":{"message":%s,"type":"BadGatewayError","param":null,"code":"callout_unavailable"}}',
    json_quote("the routing service could not pick an endpoint: " .. why)
  )
  handle:respond({ [":status"] = "502", ["content-type"] = "application/json", [STATUS_HEADER] = "unavailable" }, body)
end

local function pick_request_headers(headers)
  local out = {
    [":method"] = "POST",
    [":path"] = "/pick",
    [":authority"] = AUTHORITY,
    ["content-type"] = "application/json",
  }
  -- The contract's optional inputs, the request id for logs, and the test steering headers
  -- (the kit's x-eppkit-*, GAIE's endpoint selection). traceparent is Envoy's job.
  for key, value in pairs(headers) do
    if key == MODEL_HEADER or key == "x-request-id" or FORWARD_HEADERS[key] or key:sub(1, 9) == "x-eppkit-" then
      out[key] = value
    end
  end
  return out
end

-- The callout answered for itself (not Envoy's local reply about it) when the answer is JSON.
local function is_json(response_headers)
  local content_type = response_headers["content-type"] or ""
  return content_type:find("application/json", 1, true) ~= nil
end

function envoy_on_request(handle)
  -- Only the callout names the destination (and prefiller, encoders): never forward a client's own choice.
  handle:headers():remove(DESTINATION_HEADER)
  for _, name in ipairs(STAGE_HEADERS) do
    handle:headers():remove(name)
  end
  if handle:headers():get(":method") ~= "POST" then
    return
  end
  local body = handle:body()
  local raw = body and body:getBytes(0, body:length()) or ""

  -- body() and httpCall() yield; a wrapper (headers, body, ...) taken before a yield is dead
  -- after it ("object used outside of proper scope"), so take handle:headers() afresh.
  local response_headers, response_body = handle:httpCall(
    CLUSTER,
    pick_request_headers(handle:headers()),
    raw,
    { timeout_ms = TIMEOUT_MS, send_xff = false }
  )
  local status = tonumber(response_headers[":status"]) or 0
  local metadata = handle:streamInfo():dynamicMetadata()

  if status == 200 and is_json(response_headers) then
    -- The primary then its fallbacks, comma-separated (the JSON's "endpoint" alone when the
    -- header is missing).
    local endpoints = response_headers[DESTINATION_HEADER]
      or (response_body or ""):match('"endpoint"%s*:%s*"([^"]*)"')
    if valid_endpoint_list(endpoints) then
      endpoints = endpoints:gsub("%s", "")
      local primary = endpoints:match("^[^,]+")
      metadata:set(LB_METADATA, DESTINATION_HEADER, endpoints)
      handle:headers():replace(DESTINATION_HEADER, endpoints)
      copy_stage_headers(handle, response_headers)
      -- The route matches on the metadata: choose it again now that the metadata exists.
      handle:clearRouteCache()
      metadata:set(METADATA_NAMESPACE, "status", "picked " .. primary)
      return
    end
    respond_callout_unavailable(handle, "answer without a usable endpoint: " .. tostring(endpoints))
    return
  end

  if status >= 400 and status < 600 and is_json(response_headers) then
    -- The routing service's own verdict (400 bad body, 429 shed, 503 no endpoint).
    handle:respond({
      [":status"] = tostring(status),
      ["content-type"] = "application/json",
      [STATUS_HEADER] = "rejected " .. status,
    }, response_body or "")
    return
  end

  -- Envoy's answer about the callout: connection refused, reset, timeout (503/504 text).
  local why = string.format("callout returned %d: %s", status, (response_body or ""):sub(1, 200):gsub("%c", " "))
  if FAIL_OPEN then
    handle:logWarn("callout failed, failing open to the pool: " .. why)
    metadata:set(METADATA_NAMESPACE, "status", "fail-open: " .. why)
    return
  end
  handle:logWarn("callout failed, failing closed: " .. why)
  respond_callout_unavailable(handle, why)
end

function envoy_on_response(handle)
  local picked = handle:streamInfo():dynamicMetadata():get(METADATA_NAMESPACE)
  if picked and picked.status then
    handle:headers():replace(STATUS_HEADER, picked.status)
  end
end
