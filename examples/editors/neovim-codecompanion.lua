-- refagent as a CodeCompanion ACP adapter (CodeCompanion v18+, which has ACP adapters and `interactions`).
-- It extends the built-in `opencode` ACP adapter, a plain stdio agent like refagent, and changes its name
-- and command. Open a chat with `:CodeCompanionChat adapter=refagent` (a bare `:CodeCompanionChat refagent`
-- would send the word "refagent" as a prompt to the default adapter), pick it in a chat with `ga`, or make it
-- the default (below). `refagent` must be on Neovim's PATH (a pipx or uv tool install puts it in
-- ~/.local/bin); otherwise give the absolute path that `command -v refagent` prints.
require("codecompanion").setup({
  adapters = {
    acp = {
      refagent = function()
        return require("codecompanion.adapters").extend("opencode", {
          name = "refagent",
          formatted_name = "refagent",
          commands = {
            default = {
              "refagent",
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
