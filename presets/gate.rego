# gate: the autonomy boundary. Every external action an agent proposes
# (`airlock gate --action A --target T`) is decided here, one of
#   auto   - ship it (and count it against the action's daily cap)
#   draft  - park it in today's memory file for a human to send
#   block  - refuse it, parked too, so a human sees what was tried
#   budget - the action is auto, but today's cap is spent: defer it
# ("killed", the fifth outcome, is the kill file's, decided before this
# policy runs.) The autonomy roadmap is the diff of these tables: moving an
# action from draft to auto is a reviewed change of the pinned bundle.
#
# Input: {"action": "send_mail", "target": "x@example.test",
#         "today": {"send_mail": 3, ...}}, where today counts the auto
# actions already taken today (UTC), by action.
# Output: decision := {"outcome", "rule", "reason"}. An action no table
# names is blocked.
package airlock.gate

# Actions that ship without review, each at most this many times a day.
auto := {
	"comment_issue": 20,
	"label_issue": 50,
	"open_pr": 5,
	"push_branch": 20,
	"send_mail": 10, # to own_domains only: see mail-outside
}

# Actions a human reviews and sends: the gate parks them as drafts.
review := {
	"merge_pr": "a merge lands code on the default branch",
	"publish_post": "a public post speaks for the operator",
	"close_issue": "closing someone's issue ends their thread",
}

# Destructive or irreversible actions: never taken by an agent.
destructive := {
	"delete_branch": "deleting a branch loses work no one reviewed",
	"delete_repo": "deleting a repository cannot be undone",
	"force_push": "a force push rewrites history others have pulled",
	"send_payment": "money sent cannot be recalled",
	"drop_database": "dropped data cannot be recovered",
}

# Mail to these domains is internal; mail anywhere else is a draft. Edit to
# your own domains.
own_domains := {"airlock.test"}

default decision := {
	"outcome": "block",
	"rule": "unlisted",
	"reason": "no rule names this action: an unlisted action is blocked",
}

decision := {"outcome": "block", "rule": "destructive", "reason": why} if {
	why := destructive[input.action]
} else := {"outcome": "draft", "rule": "review", "reason": why} if {
	why := review[input.action]
} else := {"outcome": "draft", "rule": "mail-outside", "reason": reason} if {
	input.action == "send_mail"
	not own_address(input.target)
	reason := sprintf("mail to %q leaves the own domains %v: a human sends it", [input.target, own_domains])
} else := {"outcome": "budget", "rule": "daily-cap", "reason": reason} if {
	cap := auto[input.action]
	taken(input.action) >= cap
	reason := sprintf("%d of %d %s actions taken today", [taken(input.action), cap, input.action])
} else := {"outcome": "auto", "rule": "auto", "reason": reason} if {
	cap := auto[input.action]
	reason := sprintf("%s is auto: %d of %d taken today", [input.action, taken(input.action), cap])
}

# own_address: a plain local part (letters, digits, . _ + -), exactly one
# @, and the domain (any case) is one of ours. Anything else in the local
# part may route the mail on: a mail server rewrites user%elsewhere@ours
# and elsewhere!user@ours (Postfix's percent hack and bang paths, on by
# default) to another domain, and quotes and brackets hide addresses.
own_address(target) if {
	parts := split(target, "@")
	count(parts) == 2
	regex.match(`^[A-Za-z0-9._+-]+$`, parts[0])
	lower(parts[1]) in own_domains
}

# taken counts today's auto actions of one kind. A today that is not an
# object is an evaluation error (strict builtins), never a zero.
taken(action) := object.get(input.today, action, 0)
