# strict: nothing leaves the sandbox. Every connection is denied.
package airlock.presets.strict

import data.airlock.lib

rules := []

denies := []

decision := lib.decide(rules, denies)
