;;; refagent with agent-shell (https://github.com/xenodium/agent-shell), an ACP client for Emacs.
;;
;; Load this file (or copy it into your init), then M-x refagent-shell.  It defines refagent's agent
;; configuration with agent-shell's public functions (`agent-shell-make-agent-config',
;; `agent-shell-start') and acp.el's `acp-make-client', and adds it to the agents M-x agent-shell offers.
;; `refagent' must be on Emacs's `exec-path' (a pipx or uv tool install puts it in ~/.local/bin); an Emacs
;; started from a desktop launcher may not see your shell's PATH: then give the absolute path that
;; `command -v refagent' prints.

(require 'acp)
(require 'agent-shell)

(defcustom refagent-command
  '("refagent" "--log-file" "/tmp/refagent.log")
  "How to start refagent: the executable, then its arguments."
  :type '(repeat string)
  :group 'agent-shell)

(defun refagent-make-agent-config ()
  "The agent-shell configuration of refagent."
  (agent-shell-make-agent-config
   :identifier 'refagent
   :mode-line-name "refagent"
   :buffer-name "refagent"
   :shell-prompt "refagent> "
   :shell-prompt-regexp "refagent> "
   :client-maker (lambda (buffer)
                   (acp-make-client :command (car refagent-command)
                                    :command-params (cdr refagent-command)
                                    :environment-variables nil
                                    :context-buffer buffer))
   :install-instructions "pipx install refagent (or uv tool install refagent) puts refagent on PATH."))

;; Recent agent-shell releases take config makers here, older ones configs: add whichever yours lists.
(add-to-list 'agent-shell-agent-configs
             (if (functionp (car-safe agent-shell-agent-configs))
                 #'refagent-make-agent-config
               (refagent-make-agent-config)))

(defun refagent-shell ()
  "Start a refagent shell in the current project."
  (interactive)
  (agent-shell-start :config (refagent-make-agent-config)))
