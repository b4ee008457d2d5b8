# standard: a general development sandbox. Package registries for their own
# clients, read-only GitHub (API and clone), no pushes, no model APIs.
package airlock.presets.standard

import data.airlock.common
import data.airlock.lib

rules := array.concat(
	array.concat(common.registries, common.github_fetch),
	[common.github_api_read(array.concat(common.gh, common.curl))],
)

denies := common.deny_git_push(["github.com"])

decision := lib.decide(rules, denies)
