--- Where the review gets its hunks and sends its decisions: review.lua talks only to a
--- source. `M.hub()` is the real one (the hub's WebSocket through hub.lua and client.lua, its
--- state in store.lua); the unit tests hand review.lua a fake with the same methods
--- (`require('hunkgate.review').set_source(fake)`), as mini.diff does with its sources.
---
--- Answers have the hub's response shape: `{success, data?, error?, code?}`, `code` being the
--- hub's error code (`conflict`, `not_found`, …, or `disconnected` when nothing was sent).
---@class hunkgate.Source
---@field get fun(self, sid: string): hunkgate.Suggestion? an open suggestion by id
---@field find fun(self, prefix: string): hunkgate.Suggestion? by id or unique id prefix, among those `list` gives
---@field list fun(self): hunkgate.Suggestion[] open suggestions, oldest first
---@field root fun(self): string the checkout the decisions write to
---@field connected fun(self): boolean
---@field decide fun(self, sid: string, hunk_id: string, fields: {action: string, modifiedDiff?: string, lines?: integer[], comment?: string}, cb: fun(resp: table)) one decision; on success the hunk as the hub reports it is merged before `cb`, with the hunks a line-range decision added or its undo removed
---@field decide_all fun(self, sid: string, action: 'accept'|'reject', file: string?, cb: fun(resp: table), confirm: boolean?) every open hunk (of `file`); `data.decided`, `data.failed`, `data.skipped_destructive` (an accept without `confirm` leaves destructive hunks pending)
---@field finish fun(self, sid: string, action: 'finalize'|'discard', cb: fun(resp: table)) complete or discard; on success the suggestion is gone before `cb`
---@field subscribe fun(self, fn: fun(change: hunkgate.Change)) told of every change, whoever made it

local M = {}

--- The real source: the hubs this Neovim is connected to. A suggestion is decided through the
--- hub that has it (the review may have been opened in another repository than the current
--- buffer's); new reviews pick from the current repository's hub.
---@return hunkgate.Source
function M.hub()
  local hub = require('hunkgate.hub')

  --- The connection of the open review's suggestion, else the current one.
  local function reviewing()
    local sess = require('hunkgate.review').session
    return sess and hub.owner(sess.sid) or hub.current()
  end

  --- Run `merge` (store update and its consequences), then `cb`, even when `merge` fails:
  --- the review waits on `cb` to take the next key.
  local function then_answer(merge, cb, resp)
    local ok, err = pcall(merge)
    cb(resp)
    if not ok then
      error(err, 0)
    end
  end

  return {
    is_hub = true,
    get = function(_, sid)
      local conn = hub.owner(sid)
      return conn and conn.store:get(sid)
    end,
    -- Among the current repository's suggestions only: what `list` offers.
    find = function(_, prefix)
      return hub.store:find(prefix)
    end,
    list = function()
      return hub.store:list()
    end,
    root = function()
      return hub.root(reviewing())
    end,
    connected = function()
      return hub.synced(reviewing())
    end,
    decide = function(_, sid, hunk_id, fields, cb)
      local cmd = vim.tbl_extend('force', { type = 'feedback', suggestionId = sid, hunkId = hunk_id }, fields)
      local conn = hub.owner(sid)
      hub.request(cmd, function(resp)
        then_answer(function()
          if resp.success and resp.data and resp.data.hunk and conn then
            local d = resp.data
            conn.store:reshape(sid, d.hunk.id, d.new_hunks, d.removed_hunk_ids)
            hub.settle(conn.store:update_hunk(sid, d.hunk), conn)
          end
        end, cb, resp)
      end, { conn = conn })
    end,
    decide_all = function(_, sid, action, file, cb, confirm)
      local cmd = { type = 'feedback_all', suggestionId = sid, action = action, file = file, confirm = confirm or nil }
      hub.request(cmd, cb, { conn = hub.owner(sid) })
    end,
    finish = function(_, sid, action, cb)
      local conn = hub.owner(sid)
      hub.request({ type = 'complete', suggestionId = sid, action = action }, function(resp)
        then_answer(function()
          if resp.success and conn then
            hub.settle(conn.store:apply({ type = 'suggestion.completed', suggestion_id = sid }), conn)
          end
        end, cb, resp)
      end, { conn = conn })
    end,
    subscribe = function(_, fn)
      hub.subscribe(fn)
    end,
  }
end

return M
