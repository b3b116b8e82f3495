--- Text from the hub (an agent's diff, description, output, file names) made safe to show
--- outside a buffer: in notifications, the command line, virtual text, window titles and
--- footers, quickfix titles and prompts. Every control character is shown, not obeyed: ESC as
--- `^[`, other C0 controls as `^@`…`^_`, DEL as `^?`, C1 controls and Unicode bidi overrides as
--- `<U+009B>`. Tabs stay; newlines stay only where the caller asks (multi-line notifications).
--- Buffers already show control characters as `^[`, and hunk text is never changed for display
--- in them: what is reviewed is exactly what is applied.
local M = {}

local function caret(c)
  local b = c:byte()
  if b == 127 then
    return '^?'
  end
  return '^' .. string.char(b + 64)
end

---@param s any
---@param keep_newlines? boolean
---@return string
function M.text(s, keep_newlines)
  if s == nil then
    return ''
  end
  s = tostring(s)
  s = s:gsub('[%z\1-\31\127]', function(c)
    if c == '\t' or (keep_newlines and c == '\n') then
      return c
    end
    return caret(c)
  end)
  -- C1 controls (U+0080..U+009F) and bidi controls, in their UTF-8 form.
  s = s:gsub('\194([\128-\159])', function(c)
    return ('<U+%04X>'):format(c:byte())
  end)
  s = s:gsub('\226\128([\142\143\170-\174])', function(c)
    return ('<U+%04X>'):format(0x2000 + c:byte() - 128)
  end)
  s = s:gsub('\226\129([\166-\169])', function(c)
    return ('<U+%04X>'):format(0x2040 + c:byte() - 128)
  end)
  s = s:gsub('\216\156', '<U+061C>')
  return s
end

--- One line: newlines show as `^J` too.
---@param s any
---@return string
function M.line(s)
  return M.text(s, false)
end

return M
