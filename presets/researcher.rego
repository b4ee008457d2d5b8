# researcher: brain-first lookups, GitHub search when the brain is not enough
# (agent: claude). Reads GitHub's search and repository API; writes nothing.
package airlock.presets.researcher

import data.airlock.common
import data.airlock.lib

rules := [
	common.anthropic_api(common.claude),
	{
		"name": "github-search",
		"binaries": array.concat(common.gh, common.claude),
		"hosts": ["api.github.com"],
		"methods": "read-only",
		"paths": ["/search/**", "/repos/**"],
	},
]

denies := []

decision := lib.decide(rules, denies)
