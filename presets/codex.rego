# codex: OpenAI Codex CLI (npm). Talks to OpenAI, falls back to NVIDIA's
# endpoint when the operator has no OpenAI key; clones from GitHub.
package airlock.presets.codex

import data.airlock.common
import data.airlock.lib

rules := array.concat(
	[
		common.openai_api(common.codex),
		common.nvidia_api(common.codex),
	],
	common.github_fetch,
)

denies := common.deny_git_push(["github.com"])

decision := lib.decide(rules, denies)
