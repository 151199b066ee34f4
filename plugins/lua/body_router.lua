-- Body-based model routing for Envoy's Lua filter (Envoy 1.40, LuaJIT).
--
-- Reads the top-level "model" string of an OpenAI-style JSON request body, puts it in
-- the x-gateway-model-name request header and clears the route cache, so the route
-- table can choose the pool serving that model by header. A body without a usable
-- model gets a 400, a model no pool serves a 404, both as OpenAI-style error JSON.
--
-- Configuration: an optional global table set before this file is loaded (the testbed
-- prepends it to the inline source):
--   EPPKIT_BODY_ROUTER = { models = { "model-a", "model-b" } }
-- Without `models`, every model name is passed on and the route table decides.
--
-- Only POST requests are inspected; any other request loses a client-sent
-- x-gateway-model-name header (the gateway, not the client, names the pool) and goes on.

local MODEL_HEADER = "x-gateway-model-name"
local MAX_MODEL_BYTES = 256

local config = EPPKIT_BODY_ROUTER or {}
local served = nil
if config.models then
  served = {}
  for _, name in ipairs(config.models) do
    served[name] = true
  end
end

-- ---------------------------------------------------------------------------------
-- Minimal JSON reading.
--
-- Envoy's LuaJIT ships no JSON library, and release builds do not export the Lua C API
-- symbols a C module such as lua-cjson needs. The body can be megabytes of prompt: a
-- full decoder in Lua would build tables for every message only to throw them away.
-- A pattern such as '"model"%s*:%s*"(.-)"' is wrong: it also matches a "model" key
-- nested inside messages, tools or a prompt that quotes JSON, and mishandles escapes.
-- So this walks only the top-level object: it reads each key, decodes the value when
-- the key is "model", and skips every other value without building it. Skipping jumps
-- with string.find from one structural character (quote, bracket, brace) to the next,
-- so a large prompt costs a few C-level scans, not a Lua loop per byte. It accepts
-- what json.loads accepts for the parts it reads; it does not validate the parts it
-- skips (the backend does that), only keeps track of strings and nesting.
-- ---------------------------------------------------------------------------------

local function skip_ws(s, i)
  return s:find("[^ \t\r\n]", i)
end

-- s:sub(i, i) is the opening quote. Returns the index after the closing quote and the
-- raw (still escaped) contents, or nil when the string never ends. It jumps from quote to
-- quote with a plain find (escapes such as \n in a prompt cost nothing); a quote preceded
-- by an odd number of backslashes is escaped and does not end the string.
local function scan_string(s, i)
  local j = i + 1
  while true do
    local k = s:find('"', j, true)
    if not k then
      return nil
    end
    local b = k - 1
    while b > i and s:byte(b) == 92 do -- backslash
      b = b - 1
    end
    if (k - 1 - b) % 2 == 0 then
      return k + 1, s:sub(i + 1, k - 1)
    end
    j = k + 1
  end
end

local function utf8_char(cp)
  if cp < 0x80 then
    return string.char(cp)
  elseif cp < 0x800 then
    return string.char(0xC0 + math.floor(cp / 0x40), 0x80 + cp % 0x40)
  elseif cp < 0x10000 then
    return string.char(0xE0 + math.floor(cp / 0x1000), 0x80 + math.floor(cp / 0x40) % 0x40, 0x80 + cp % 0x40)
  end
  return string.char(
    0xF0 + math.floor(cp / 0x40000),
    0x80 + math.floor(cp / 0x1000) % 0x40,
    0x80 + math.floor(cp / 0x40) % 0x40,
    0x80 + cp % 0x40
  )
end

local SIMPLE_ESCAPES = { ['"'] = '"', ["\\"] = "\\", ["/"] = "/", b = "\b", f = "\f", n = "\n", r = "\r", t = "\t" }

-- Decode a JSON string's raw contents; nil on a bad escape.
local function decode_string(raw)
  if not raw:find("\\", 1, true) then
    return raw
  end
  local out, i, n = {}, 1, #raw
  while i <= n do
    local k = raw:find("\\", i, true)
    if not k then
      out[#out + 1] = raw:sub(i)
      break
    end
    out[#out + 1] = raw:sub(i, k - 1)
    local c = raw:sub(k + 1, k + 1)
    if SIMPLE_ESCAPES[c] then
      out[#out + 1] = SIMPLE_ESCAPES[c]
      i = k + 2
    elseif c == "u" then
      local cp = tonumber(raw:sub(k + 2, k + 5):match("^%x%x%x%x$") or "", 16)
      if not cp then
        return nil
      end
      i = k + 6
      if cp >= 0xD800 and cp <= 0xDBFF then -- a surrogate pair encodes one code point
        local low = tonumber(raw:sub(i, i + 5):match("^\\u(%x%x%x%x)$") or "", 16)
        if low and low >= 0xDC00 and low <= 0xDFFF then
          cp = 0x10000 + (cp - 0xD800) * 0x400 + (low - 0xDC00)
          i = i + 6
        end
      end
      out[#out + 1] = utf8_char(cp)
    else
      return nil
    end
  end
  return table.concat(out)
end

-- Skip the JSON value starting at s:sub(i, i); returns the index after it, or nil.
local function skip_value(s, i)
  local c = s:sub(i, i)
  if c == '"' then
    return (scan_string(s, i))
  elseif c == "{" or c == "[" then
    local depth, j = 0, i
    while true do
      local k = s:find('[%[%]{}"]', j)
      if not k then
        return nil
      end
      local ch = s:sub(k, k)
      if ch == '"' then
        j = scan_string(s, k)
        if not j then
          return nil
        end
      else
        depth = depth + ((ch == "{" or ch == "[") and 1 or -1)
        j = k + 1
        if depth == 0 then
          return j
        end
      end
    end
  end
  -- A number, true, false or null runs to the next delimiter.
  local k = s:find("[,}%]%s]", i)
  if k == i then
    return nil
  end
  return k or (#s + 1)
end

-- The top-level "model" of a JSON object body, or nil and (error code, message).
-- When "model" appears more than once the last one counts, as in Python's json.loads.
local function extract_model(s)
  local i = skip_ws(s, 1)
  if not i or s:sub(i, i) ~= "{" then
    return nil, "invalid_json", "request body must be a JSON object"
  end
  local malformed = "request body is not valid JSON"
  local model, problem = nil, nil
  i = skip_ws(s, i + 1)
  if i and s:sub(i, i) == "}" then
    i = nil -- an empty object: no keys to read
  elseif not i then
    return nil, "invalid_json", malformed
  end
  while i do
    if s:sub(i, i) ~= '"' then
      return nil, "invalid_json", malformed
    end
    local after, raw_key = scan_string(s, i)
    if not after then
      return nil, "invalid_json", malformed
    end
    i = skip_ws(s, after)
    if not i or s:sub(i, i) ~= ":" then
      return nil, "invalid_json", malformed
    end
    i = skip_ws(s, i + 1)
    if not i then
      return nil, "invalid_json", malformed
    end
    if decode_string(raw_key) == "model" then
      if s:sub(i, i) == '"' then
        local raw_value
        i, raw_value = scan_string(s, i)
        model = raw_value and decode_string(raw_value)
        problem = model == nil and "invalid_json" or nil
      else
        i = skip_value(s, i)
        model, problem = nil, "invalid_model"
      end
    else
      i = skip_value(s, i)
    end
    if not i then
      return nil, "invalid_json", malformed
    end
    i = skip_ws(s, i)
    local c = i and s:sub(i, i)
    if c == "}" then
      break
    elseif c ~= "," then
      return nil, "invalid_json", malformed
    end
    i = skip_ws(s, i + 1)
    if not i then
      return nil, "invalid_json", malformed
    end
  end
  if problem == "invalid_json" then
    return nil, problem, malformed
  elseif problem == "invalid_model" then
    return nil, problem, '"model" must be a string'
  elseif model == nil then
    return nil, "missing_model", 'request body has no "model"'
  elseif model == "" then
    return nil, "invalid_model", '"model" must not be empty'
  elseif #model > MAX_MODEL_BYTES or model:find("%c") then
    -- It becomes a header value: no control characters, bounded length.
    return nil, "invalid_model", '"model" must be at most 256 bytes without control characters'
  end
  return model
end

-- ---------------------------------------------------------------------------------
-- OpenAI-style errors (the same shape as services/openai_errors.py).
-- ---------------------------------------------------------------------------------

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

local ERROR_TYPES = { [400] = "BadRequestError", [404] = "NotFoundError" }

local function respond_error(handle, status, message, code)
  local body = string.format(
    '{"error":{"message":%s,"type":"%s","param":"model","code":%s}}',
    json_quote(message),
    ERROR_TYPES[status],
    json_quote(code)
  )
  handle:respond({ [":status"] = tostring(status), ["content-type"] = "application/json" }, body)
end

function envoy_on_request(handle)
  handle:headers():remove(MODEL_HEADER)
  if handle:headers():get(":method") ~= "POST" then
    return
  end
  local body = handle:body()
  local raw = body and body:getBytes(0, body:length()) or ""
  local model, code, message = extract_model(raw)
  if not model then
    respond_error(handle, 400, message, code)
    return
  end
  if served and not served[model] then
    respond_error(
      handle,
      404,
      string.format("model %s is not served here; served models: %s", json_quote(model), table.concat(config.models, ", ")),
      "model_not_found"
    )
    return
  end
  -- body() yielded; a wrapper taken before a yield is dead after it, so take the headers afresh.
  handle:headers():replace(MODEL_HEADER, model)
  -- Changing headers from Lua clears the route cache already (clear_route_cache defaults
  -- to true); say it explicitly so a config that turns that off still routes by model.
  handle:clearRouteCache()
end
