# writer: drafts mail and documents (agent: claude). It never publishes, so
# the only place it can reach is its model.
package airlock.presets.writer

import data.airlock.common
import data.airlock.lib

rules := [common.anthropic_api(common.claude)]

denies := []

decision := lib.decide(rules, denies)
