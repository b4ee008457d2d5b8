package airlock.gate_test

import data.airlock.gate

ask(action, target, today) := d if {
	d := gate.decision with input as {"action": action, "target": target, "today": today}
}

test_auto_under_the_cap if {
	d := ask("comment_issue", "o/r#1", {"comment_issue": 19})
	d.outcome == "auto"
	d.rule == "auto"
	contains(d.reason, "19 of 20")
}

test_cap_turns_auto_into_budget if {
	every n in [20, 21, 500] {
		d := ask("comment_issue", "o/r#1", {"comment_issue": n})
		d.outcome == "budget"
		d.rule == "daily-cap"
	}
}

test_caps_are_per_action if {
	d := ask("open_pr", "o/r", {"comment_issue": 20})
	d.outcome == "auto"
}

test_mail_to_own_domain_is_auto if {
	every to in ["ops@airlock.test", "ops@AIRLOCK.test"] {
		ask("send_mail", to, {}).outcome == "auto"
	}
}

test_mail_outside_is_a_draft if {
	every to in [
		"x@example.test", "ops@airlock.test.example.test", "a@b@airlock.test", "@airlock.test", "airlock.test",
		# Routed on by the mail server: the percent hack, a bang path,
		# a quoted or bracketed local part.
		"evil%example.test@airlock.test", "example.test!evil@airlock.test", "\"evil@example.test\"@airlock.test",
		"<evil@example.test>@airlock.test", "a,b@airlock.test", "a b@airlock.test",
	] {
		d := ask("send_mail", to, {})
		d.outcome == "draft"
		d.rule == "mail-outside"
	}
}

# An outside address is a draft even when the cap is spent: it is not auto.
test_mail_outside_over_the_cap_is_still_a_draft if {
	ask("send_mail", "x@example.test", {"send_mail": 10}).outcome == "draft"
}

test_review_actions_are_drafts if {
	every a, _ in gate.review {
		d := ask(a, "o/r#7", {})
		d.outcome == "draft"
		d.rule == "review"
	}
}

test_destructive_actions_are_blocked if {
	every a, why in gate.destructive {
		d := ask(a, "o/r", {})
		d.outcome == "block"
		d.rule == "destructive"
		d.reason == why
	}
}

test_unlisted_action_is_blocked if {
	every a in ["rm_rf", "", "SEND_MAIL", "send_mail "] {
		d := ask(a, "x@airlock.test", {})
		d.outcome == "block"
		d.rule == "unlisted"
	}
}

# A today that is not counts never reads as zero actions taken.
test_unknown_counts_never_auto if {
	d := gate.decision with input as {"action": "open_pr", "target": "o/r"}
	d.outcome == "block"
}

# No action is in two tables: each has one outcome a reviewer can find.
test_tables_are_disjoint if {
	every a, _ in gate.auto {
		not gate.review[a]
		not gate.destructive[a]
	}
	every a, _ in gate.review {
		not gate.destructive[a]
	}
}
