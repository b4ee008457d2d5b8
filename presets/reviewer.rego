# reviewer: audits a pull request's diff (agent: claude). GET-only on the
# GitHub API; may clone a repository, may never push.
package airlock.presets.reviewer

import data.airlock.common
import data.airlock.lib

rules := array.concat(
	[
		common.anthropic_api(common.claude),
		common.github_api_read(array.concat(common.gh, array.concat(common.claude, common.curl))),
	],
	common.github_fetch,
)

denies := common.deny_git_push(["github.com"])

decision := lib.decide(rules, denies)
