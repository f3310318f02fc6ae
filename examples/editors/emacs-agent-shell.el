;;; refagent with agent-shell (https://github.com/xenodium/agent-shell), an ACP client for Emacs.
;;
;; Load this file (or copy it into your init), then M-x refagent-shell.  It defines refagent's agent
;; configuration the way agent-shell's own agents are defined (see agent-shell-pi.el there) and adds it
;; to the agents M-x agent-shell offers.

(require 'agent-shell)

(defcustom refagent-command
  '("/absolute/path/to/refagent/.venv/bin/refagent" "--log-file" "/tmp/refagent.log")
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
                   (agent-shell--make-acp-client :command (car refagent-command)
                                                 :command-params (cdr refagent-command)
                                                 :environment-variables nil
                                                 :context-buffer buffer))
   :install-instructions "make demo in a refagent checkout creates .venv/bin/refagent."))

;; Recent agent-shell releases take config makers here, older ones configs: add whichever yours lists.
(add-to-list 'agent-shell-agent-configs
             (if (functionp (car-safe agent-shell-agent-configs))
                 #'refagent-make-agent-config
               (refagent-make-agent-config)))

(defun refagent-shell ()
  "Start a refagent shell in the current project."
  (interactive)
  (agent-shell--dwim :config (refagent-make-agent-config) :new-shell t))
