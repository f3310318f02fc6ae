-- refagent as a CodeCompanion ACP adapter (CodeCompanion v18+, which has ACP adapters and `interactions`).
-- It extends the built-in `opencode` ACP adapter, a plain stdio agent like refagent, and changes its name
-- and command. Open a chat with `:CodeCompanionChat refagent` (or make it the default, below).
require("codecompanion").setup({
  adapters = {
    acp = {
      refagent = function()
        return require("codecompanion.adapters").extend("opencode", {
          name = "refagent",
          formatted_name = "refagent",
          commands = {
            default = {
              "/absolute/path/to/refagent/.venv/bin/refagent",
              "--log-file",
              "/tmp/refagent.log",
            },
          },
        })
      end,
    },
  },
  interactions = {
    chat = { adapter = "refagent" },
  },
})
