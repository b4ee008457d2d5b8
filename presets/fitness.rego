# fitness: strength and mobility coaching from books already ingested into the
# brain (agent: claude). Needs nothing but its model.
package airlock.presets.fitness

import data.airlock.common
import data.airlock.lib

rules := [common.anthropic_api(common.claude)]

denies := []

decision := lib.decide(rules, denies)
