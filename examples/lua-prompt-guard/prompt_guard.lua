-- prompt_guard.lua: an Envoy Lua HTTP filter that guards an LLM endpoint.
--
--  * A chat request whose prompt is over max_prompt_tokens gets an OpenAI-style 400 from Envoy
--    itself: nothing behind the guard (the endpoint picker, the model) sees it.
--  * Every other request is tagged with x-prompt-tokens (the estimate), on the request for what
--    runs behind the guard and on the response for the client.
--
-- Tokens are estimated as the model's mock counts them: words and punctuation marks of every
-- message's "content" string. Config: the table EPPKIT_CONFIG, which eppkit sets from the
-- filter's config; in production, set it at the top of this file instead.
local config = EPPKIT_CONFIG or {}
local MAX_PROMPT_TOKENS = config.max_prompt_tokens or 4096
local TAG = config.tag_header or "x-prompt-tokens"

-- The JSON string that starts at body[i] (an opening quote), unescaped enough to count words.
local function json_string_at(body, i)
  local out, j = {}, i + 1
  while j <= #body do
    local c = body:sub(j, j)
    if c == "\\" then
      local nxt = body:sub(j + 1, j + 1)
      out[#out + 1] = (nxt == "n" or nxt == "t" or nxt == "r") and " " or nxt
      j = j + 2
    elseif c == '"' then
      return table.concat(out), j
    else
      out[#out + 1] = c
      j = j + 1
    end
  end
  return table.concat(out), j
end

local function count_tokens(text)
  local n = 0
  for _ in text:gmatch("[%w_]+") do n = n + 1 end
  for _ in text:gmatch("[^%w%s_]") do n = n + 1 end
  return n
end

-- Words and punctuation of every "content": "..." string in the body, and of the "text": "..."
-- parts of multimodal contents. Each string value is read whole, so text inside one is never
-- taken for a key.
local function prompt_tokens(body)
  local total, pos = 0, 1
  while true do
    local _, value_start, key = body:find('"([%w_]+)"%s*:%s*"', pos)
    if not value_start then
      return total
    end
    local text, stop = json_string_at(body, value_start)
    if key == "content" or key == "text" then
      total = total + count_tokens(text)
    end
    pos = stop + 1
  end
end

local function reject(handle, tokens)
  local message = string.format(
    "This request's prompt has about %d tokens; this endpoint accepts at most %d.", tokens, MAX_PROMPT_TOKENS)
  handle:respond(
    {[":status"] = "400", ["content-type"] = "application/json", [TAG] = tostring(tokens)},
    string.format('{"error": {"message": "%s", "type": "BadRequestError", "param": "messages", "code": "prompt_too_long"}}',
      message))
end

function envoy_on_request(handle)
  if handle:headers():get(":method") ~= "POST" then
    return
  end
  local body = handle:body()
  if body == nil then
    return
  end
  local tokens = prompt_tokens(body:getBytes(0, body:length()))
  if tokens > MAX_PROMPT_TOKENS then
    reject(handle, tokens)
    return
  end
  handle:headers():replace(TAG, tostring(tokens))
  handle:streamInfo():dynamicMetadata():set("prompt_guard", "tokens", tostring(tokens))
end

function envoy_on_response(handle)
  local seen = handle:streamInfo():dynamicMetadata():get("prompt_guard")
  if seen and seen.tokens then
    handle:headers():replace(TAG, seen.tokens)
  end
end
