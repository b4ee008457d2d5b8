#!/bin/sh
# airlock-spawn-runner.sh: run one git-substrate spawn of airlock's
# orchestrator and commit its result back to the spawn branch.
#
# A dispatcher (a command, or a GitHub Actions workflow) runs this with:
#   AIRLOCK_SPAWN_ID      the task id (required)
#   AIRLOCK_SPAWN_REMOTE  the remote holding the branch (required; in a
#                         workflow, a URL carrying the job's token)
#   AIRLOCK_SPAWN_BRANCH  the branch (default spawn/$AIRLOCK_SPAWN_ID)
#   AIRLOCK_RUNNER_AIRLOCK  the airlock binary (default: airlock on PATH)
#   AIRLOCK_RUNNER_LAUNCH_ARGS  this runner's own flags for airlock launch,
#                         split at blanks (--upstream-ca FILE, --memory-max N,
#                         ...); the job's preset and pin come after them and win
#   AIRLOCK_POLICY ...    read by airlock launch itself: the bundle, which
#                         must be the one whose hash the spawn pinned
#
# It clones the branch, reads spawns/<id>/manifest.json, and runs the
# sub-agent under `airlock launch --preset <preset> --policy-sha256 <pin>`:
# the kind's egress policy, from the very bundle the spawning host verified,
# holds on this runner too. Without airlock on the runner the sub-agent
# runs plainly, and result.json's detail says so in capitals. The kind's
# timeout is enforced with timeout(1): exit 124, status timeout.
#
# It writes stdout.log, stderr.log, result.json (and audit.jsonl under
# airlock) into spawns/<id>/, commits and pushes them. It exits 0 once a
# result is pushed, whatever the sub-agent did; non-zero only when it could
# not deliver one (the orchestrator then synthesises a timeout).
#
# Needs: git, jq, timeout, sha256sum.
set -eu

die() {
	echo "airlock-spawn-runner: $*" >&2
	exit 1
}

id=${AIRLOCK_SPAWN_ID:?airlock-spawn-runner: AIRLOCK_SPAWN_ID is not set}
remote=${AIRLOCK_SPAWN_REMOTE:?airlock-spawn-runner: AIRLOCK_SPAWN_REMOTE is not set}
branch=${AIRLOCK_SPAWN_BRANCH:-spawn/$id}
case $id in
'' | -* | *[!A-Za-z0-9-]*) die "task id '$id': want letters, digits and '-'" ;;
esac
for tool in git jq timeout sha256sum; do
	command -v "$tool" >/dev/null 2>&1 || die "$tool is not installed on this runner"
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git clone --quiet --no-local --depth 1 --branch "$branch" "$remote" "$work/repo" ||
	die "cannot clone $branch from $remote"
cd "$work/repo"
dir=spawns/$id
manifest=$dir/manifest.json

export GIT_AUTHOR_NAME=airlock-runner GIT_AUTHOR_EMAIL=airlock-runner@localhost
export GIT_COMMITTER_NAME=airlock-runner GIT_COMMITTER_EMAIL=airlock-runner@localhost

now() { date -u +%Y-%m-%dT%H:%M:%SZ; }
started=$(now)
kind=
warning=

# finish STATUS EXIT DETAIL [RESULT_JSON] writes result.json, commits and
# pushes the spawn's files, and ends the runner.
finish() {
	detail=$3
	if [ -n "$warning" ]; then
		detail="$warning${detail:+; $detail}"
	fi
	touch "$dir/stdout.log" "$dir/stderr.log"
	jq -n --arg task "$id" --arg kind "$kind" --arg status "$1" --argjson exit "$2" \
		--arg started "$started" --arg ended "$(now)" --arg detail "$detail" \
		--argjson result "${4:-null}" --argjson tokens "${tokens:-null}" '
		{task: $task, kind: $kind, substrate: "git", status: $status, exit_code: $exit,
		 started: $started, ended: $ended}
		+ (if $tokens == null then {} else {usage: {tokens: $tokens}} end)
		+ (if $result == null then {} else {result: $result} end)
		+ (if $detail == "" then {} else {detail: $detail} end)' >"$dir/result.json"
	git add -f -- "$dir"
	git commit --quiet -m "spawn $id: $1"
	git push --quiet origin "HEAD:refs/heads/$branch" || die "cannot push the result of $id to $branch"
	exit 0
}

[ -f "$manifest" ] || finish failed 1 "no $manifest on $branch"
# Every field the runner uses, shell-quoted by jq (@sh), so no value of the
# manifest is ever read as shell syntax.
fields=$(jq -r '
	def need(f): if f == null or f == "" then error("manifest.json has no \(f)") else f end;
	"mid=\(need(.id) | @sh)",
	"kind=\(need(.kind) | @sh)",
	"binary=\(need(.binary) | @sh)",
	"pin=\((.sha256 // "") | @sh)",
	"preset=\(need(.preset) | @sh)",
	"policy=\((.policy_sha256 // "") | @sh)",
	"secs=\(need(.timeout_seconds) | tostring | @sh)",
	"args=\((.args // []) | map(@sh) | join(" ") | @sh)",
	((.env // {}) | to_entries | map(
		if (.key | test("^[A-Za-z_][A-Za-z0-9_]*$")) then "\(.key)=\(.value)" | @sh
		else error("env name \(.key | tojson) is not a variable name") end)
	| "envs=\(join(" ") | @sh)", "envflags=\(map("--env " + .) | join(" ") | @sh)")
	' "$manifest" 2>&1) || finish failed 1 "manifest.json: $fields"
eval "$fields"
[ "$mid" = "$id" ] || finish failed 1 "manifest.json is for task $mid, not $id"
case $secs in '' | *[!0-9]*) finish failed 1 "manifest.json: timeout_seconds '$secs' is not a number" ;; esac
# timeout(1) reads 0 as no timeout at all.
[ "$secs" -gt 0 ] || finish failed 1 "manifest.json: timeout_seconds $secs: want a positive timeout"
[ -x "$binary" ] || finish failed 1 "binary $binary is not an executable file on this runner"
if [ -n "$pin" ]; then
	echo "$pin  $binary" | sha256sum -c --status - ||
		finish failed 1 "binary $binary does not have the pinned sha256 $pin (it has $(sha256sum "$binary" | cut -d' ' -f1))"
fi

mkdir -p "$dir/work"
airlock=${AIRLOCK_RUNNER_AIRLOCK:-$(command -v airlock || true)}
root=$PWD
if [ -n "$airlock" ]; then
	[ -n "$policy" ] || finish failed 1 "manifest.json has no policy_sha256: refusing to run under a bundle nobody pinned"
	# The sandbox's user reads the checkout and writes only spawns/<id>/work:
	# its logs, audit log and result, beside it, are beyond its reach.
	chmod -R a+rX "$work"
	chmod a+rwx "$dir/work"
	launch="$(printf '%s' "$airlock" | jq -Rr @sh) launch ${AIRLOCK_RUNNER_LAUNCH_ARGS:-} --preset $(printf '%s' "$preset" | jq -Rr @sh)"
	launch="$launch --policy-sha256 $(printf '%s' "$policy" | jq -Rr @sh) --audit-log $dir/audit.jsonl --sandbox-id spawn-$id"
	launch="$launch --cwd $(printf '%s' "$root" | jq -Rr @sh) --ro $(printf '%s' "$root" | jq -Rr @sh)"
	launch="$launch --rw $(printf '%s' "$root/$dir/work" | jq -Rr @sh) --exec $(printf '%s' "$binary" | jq -Rr @sh)"
	launch="$launch $envflags --"
else
	warning="WARNING: airlock is not on this runner: the sub-agent ran WITHOUT a sandbox and WITHOUT its preset's egress policy ($preset)"
	echo "airlock-spawn-runner: $warning" >&2
	launch="env $envs"
fi

set +e
eval "timeout -k 10 $secs $launch $(printf '%s' "$binary" | jq -Rr @sh) $args" \
	</dev/null >"$dir/stdout.log" 2>"$dir/stderr.log"
rc=$?
set -e

last=$(tail -n 1 "$dir/stdout.log")
result=null
tokens=
# Exactly one JSON value, an object: a line like `{} {}` is not a result.
if printf '%s' "$last" | jq -se 'length == 1 and (.[0] | type == "object")' >/dev/null 2>&1; then
	result=$last
	tokens=$(printf '%s' "$last" | jq -r '.usage.tokens | if type == "number" and . >= 0 and . == floor then tostring else empty end')
fi
if [ "$rc" -eq 124 ]; then
	finish timeout 124 "timed out after $secs s: killed" "$result"
elif [ "$rc" -ne 0 ]; then
	finish failed "$rc" "exited $rc: $(tail -n 1 "$dir/stderr.log")" "$result"
elif [ "$result" = null ]; then
	finish failed 0 "the last stdout line is not a JSON object" null
fi
finish done 0 "" "$result"
