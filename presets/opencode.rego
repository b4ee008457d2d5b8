# opencode: multi-provider coding agent (npm). Reaches the providers it is
# configured for. It honours OPENAI_BASE_URL: an operator who points it at
# another endpoint adds that host here.
package airlock.presets.opencode

import data.airlock.common
import data.airlock.lib

rules := array.concat(
	[
		common.openai_api(common.opencode),
		common.anthropic_api(common.opencode),
		common.nvidia_api(common.opencode),
		{
			"name": "openrouter-api",
			"binaries": common.opencode,
			"hosts": ["openrouter.ai"],
			"methods": ["GET", "POST"],
			"paths": ["/api/v1/**"],
		},
	],
	common.github_fetch,
)

denies := common.deny_git_push(["github.com"])

decision := lib.decide(rules, denies)
