# coder: writes and refactors code with builds and tests (agent: pi).
# Reaches its model, the package registries of its toolchains, and clones
# from GitHub. It cannot push: results go back through the orchestrator.
package airlock.presets.coder

import data.airlock.common
import data.airlock.lib

rules := array.concat(
	[
		common.anthropic_api(common.pi),
		common.nvidia_api(common.pi),
	],
	array.concat(common.registries, common.github_fetch),
)

denies := common.deny_git_push(["github.com"])

decision := lib.decide(rules, denies)
