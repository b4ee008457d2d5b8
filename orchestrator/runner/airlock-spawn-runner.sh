#!/bin/sh
# airlock-spawn-runner.sh: run one git-substrate spawn of airlock's
# orchestrator and commit its result back to the spawn branch.
#
# A dispatcher (a command, or a GitHub Actions workflow) runs this with:
#   AIRLOCK_SPAWN_ID      the task id (required)
#   AIRLOCK_SPAWN_REMOTE  the remote holding the branch (required). An
#                         http(s) URL may carry credentials
#                         (https://x-access-token:TOKEN@github.com/o/r):
#                         they are sent as an Authorization header through
#                         git's environment, never written into the
#                         checkout's .git, and a sandboxed sub-agent sees
#                         neither them nor this variable
#   AIRLOCK_SPAWN_BRANCH  the branch (default spawn/$AIRLOCK_SPAWN_ID)
#   AIRLOCK_RUNNER_AIRLOCK  the airlock binary (default: airlock on PATH)
#   AIRLOCK_RUNNER_LAUNCH_ARGS  this runner's own flags for airlock launch,
#                         split at blanks (--upstream-ca FILE, --memory-max N,
#                         ...); the job's --preset and --policy-sha256 come
#                         after them (airlock launch takes a repeated flag's
#                         last value, so the job's)
#   AIRLOCK_POLICY ...    read by airlock launch itself: the bundle, which
#                         must be the one whose hash the spawn pinned
#
# It clones the branch, reads spawns/<id>/manifest.json, and runs the
# sub-agent under `airlock launch --preset <preset> --policy-sha256 <pin>`:
# the kind's egress policy, from the very bundle the spawning host verified,
# holds on this runner too. The sandbox reads spawns/<id>/ only (not the
# rest of the checkout, never .git) and writes spawns/<id>/work only.
# Without airlock on the runner the task fails, unless
# AIRLOCK_RUNNER_ALLOW_UNSANDBOXED=1: then the sub-agent runs plainly, as
# this runner's user, with the remote's credentials within its reach (this
# process's starting environment in /proc, the checkout's .git), and
# result.json's detail says so in capitals. The kind's timeout is enforced
# with timeout(1): exit 124, status timeout.
#
# No value of the manifest is ever read as shell syntax: the command is
# built with `set --`, and the preset, the pins and the task id are checked
# for their format first.
#
# It writes stdout.log, stderr.log, result.json (and audit.jsonl under
# airlock) into spawns/<id>/, commits and pushes them. It exits 0 once a
# result is pushed, whatever the sub-agent did; non-zero only when it could
# not deliver one (the orchestrator then fails the task with exit code 124
# once the kind's timeout and its grace have passed).
#
# Needs: git, jq (1.6 or later), timeout, sha256sum, base64.
set -eu

die() {
	echo "airlock-spawn-runner: $*" >&2
	exit 1
}

id=${AIRLOCK_SPAWN_ID:?airlock-spawn-runner: AIRLOCK_SPAWN_ID is not set}
remote=${AIRLOCK_SPAWN_REMOTE:?airlock-spawn-runner: AIRLOCK_SPAWN_REMOTE is not set}
# Not passed on to what runs next (a process of the same user can read it
# in /proc all the same: the sandbox is what keeps the sub-agent from it).
unset AIRLOCK_SPAWN_REMOTE
branch=${AIRLOCK_SPAWN_BRANCH:-spawn/$id}
case $id in
'' | -* | *[!A-Za-z0-9-]*) die "task id '$id': want letters, digits and '-'" ;;
esac
for tool in git jq timeout sha256sum base64; do
	command -v "$tool" >/dev/null 2>&1 || die "$tool is not installed on this runner"
done

# url is the remote without credentials (what git may record and print);
# auth, when the URL had credentials, the Authorization header carrying
# them (used as written: percent-encoding is not decoded).
url=$remote
auth=
case $remote in
http://*@* | https://*@*)
	scheme=${remote%%://*}
	rest=${remote#*://}
	hostpart=${rest%%/*}
	case $hostpart in
	*@*)
		url=$scheme://${hostpart##*@}${rest#"$hostpart"}
		auth="Authorization: Basic $(printf '%s' "${hostpart%@*}" | base64 | tr -d '\n')"
		;;
	esac
	;;
esac

# rgit runs git with the credentials in its environment (GIT_CONFIG_*: not
# in any command line, not in any file).
rgit() {
	(
		if [ -n "$auth" ]; then
			GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=http.extraHeader GIT_CONFIG_VALUE_0=$auth
			export GIT_CONFIG_COUNT GIT_CONFIG_KEY_0 GIT_CONFIG_VALUE_0
		fi
		exec git "$@"
	)
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export GIT_TERMINAL_PROMPT=0
rgit clone --quiet --no-local --depth 1 --branch "$branch" -- "$url" "$work/repo" ||
	die "cannot clone $branch from $url"
cd "$work/repo"
dir=spawns/$id
manifest=$dir/manifest.json

export GIT_AUTHOR_NAME=airlock-runner GIT_AUTHOR_EMAIL=airlock-runner@localhost
export GIT_COMMITTER_NAME=airlock-runner GIT_COMMITTER_EMAIL=airlock-runner@localhost

now() { date -u +%Y-%m-%dT%H:%M:%SZ; }
started=$(now)
kind=
warning=
tokens=
# Files of the runner's own, outside the checkout (never committed).
resultfile=$work/result.line
detailfile=$work/detail.txt
: >"$resultfile"

# finish STATUS EXIT DETAIL writes result.json (with the result in
# $resultfile, if that is not empty), commits and pushes the spawn's files,
# and ends the runner. The result and the detail go to jq through files: a
# line of any length fits (an argument over 128 KiB does not).
finish() {
	detail=$3
	# work/ is the sub-agent's: what git cannot add of it (a repository
	# of its own with no commit) must not cost the result and the audit
	# log, which the exit trap would delete with the checkout.
	keep=
	# Nor may git enter a repository of the sub-agent's in work/ (a .git
	# directory, or a file or link naming one): adding work/ runs git
	# inside it with its own config (core.fsmonitor, a clean filter), as
	# the runner's user, and records a gitlink, not its files. Each .git
	# goes, and its files are committed as files; one that will not go
	# keeps work/ out of the commit.
	if [ -d "$dir/work" ]; then
		# In any case: git takes .GIT for .git where the file system
		# folds case. A find or rm that fails (a directory the runner may
		# not list) must not end the runner here, without its result:
		# the second find, which any error answers, keeps work/ out.
		# In the C locale: -iname folds as the locale does, and Turkish
		# folds I to dotless ı.
		nested=$(LC_ALL=C find "$dir/work" -iname .git -prune -print -exec rm -rf -- {} + 2>&1 || true)
		if [ -n "$(LC_ALL=C find "$dir/work" -iname .git -print -quit 2>&1 || echo failed)" ]; then
			keep=":(exclude)$dir/work"
			warning="${warning:+$warning; }work/ was not committed: a git repository in it could not be removed"
		elif [ -n "$nested" ]; then
			warning="${warning:+$warning; }work/ held git repositories, committed as plain files without them: $(printf '%s\n' "$nested" | sed "s|^$dir/||" | head -n 3 | tr '\n' ' ')"
		fi
	fi
	if [ -z "$keep" ] && [ -d "$dir/work" ] && ! added=$(git add -f -- "$dir/work" 2>&1); then
		git reset -q -- "$dir/work" >/dev/null 2>&1 || true
		keep=":(exclude)$dir/work"
		warning="${warning:+$warning; }work/ was not committed: $(printf '%s\n' "$added" | grep . | tail -n 1)"
	fi
	if [ -n "$warning" ]; then
		detail="$warning${detail:+; $detail}"
	fi
	printf '%s' "$detail" >"$detailfile"
	mkdir -p "$dir" # a branch without spawns/<id>/ gets its result too
	touch "$dir/stdout.log" "$dir/stderr.log"
	jq -n --arg task "$id" --arg kind "$kind" --arg status "$1" --argjson exit "$2" \
		--arg started "$started" --arg ended "$(now)" --rawfile detail "$detailfile" \
		--slurpfile result "$resultfile" --arg tokens "$tokens" '
		{task: $task, kind: $kind, substrate: "git", status: $status, exit_code: $exit,
		 started: $started, ended: $ended}
		+ (if $tokens == "" then {} else {usage: {tokens: ($tokens | tonumber)}} end)
		+ (if $result == [] then {} else {result: $result[0]} end)
		+ (if $detail == "" then {} else {detail: $detail} end)' >"$dir/result.json"
	git add -f -- "$dir" ${keep:+"$keep"}
	# No hook of the checkout's runs, with the credentials in its
	# environment or at all.
	git -c core.hooksPath=/dev/null commit --quiet --no-verify -m "spawn $id: $1"
	rgit -c core.hooksPath=/dev/null push --quiet --no-verify -- "$url" "HEAD:refs/heads/$branch" || die "cannot push the result of $id to $branch"
	exit 0
}

[ -f "$manifest" ] || finish failed 1 "no $manifest on $branch"
# The scalar fields, each required to be a string (a number for the
# timeout) and shell-quoted whole by jq (@sh): an array would be quoted
# word by word, so it is refused, as is a NUL, which a shell variable
# cannot hold.
fields=$(jq -r '
	def str(f; name): if f == null or f == "" then if name == "" then "" else error("manifest.json has no \(name)") end
		elif (f | type) != "string" then error("manifest.json: \(name) is not a string")
		elif (f | explode | any(. == 0)) then error("manifest.json: \(name) holds a NUL")
		else f end;
	if type != "object" then error("manifest.json is not an object") else . end
	| "mid=\(str(.id; "id") | @sh)",
	"kind=\(str(.kind; "kind") | @sh)",
	"binary=\(str(.binary; "binary") | @sh)",
	"pin=\(str(.sha256; "") | @sh)",
	"preset=\(str(.preset; "preset") | @sh)",
	"policy=\(str(.policy_sha256; "") | @sh)",
	"secs=\(if (.timeout_seconds | type) == "number" then .timeout_seconds | tostring else "" end | @sh)",
	"nargs=\((.args // []) | if type != "array" or any(.[]; type != "string" or (explode | any(. == 0))) then error("manifest.json: args is not a list of strings") else length end)",
	"nenv=\((.env // {}) | if type != "object" then error("manifest.json: env is not an object") else . end
		| to_entries | if any(.[]; (.key | test("^[A-Za-z_][A-Za-z0-9_]*$") | not)) then error("manifest.json: env has a name that is not a variable name")
		elif any(.[]; (.value | type) != "string" or (.value | explode | any(. == 0))) then error("manifest.json: an env value is not a string") else length end)"
	' "$manifest" 2>&1) || finish failed 1 "manifest.json: $fields"
eval "$fields"
[ "$mid" = "$id" ] || finish failed 1 "manifest.json is for task $mid, not $id"
case $secs in '' | *[!0-9]*) finish failed 1 "manifest.json: timeout_seconds '$secs' is not a whole number" ;; esac
# timeout(1) reads 0 as no timeout at all.
[ "$secs" -gt 0 ] || finish failed 1 "manifest.json: timeout_seconds $secs: want a positive timeout"
# A preset is a Rego package's name; the pins are hex. Checked with case:
# grep would pass a value whose first line alone is well-formed.
quoted() { printf '%s' "$1" | jq -Rs .; }
case $preset in
'' | [!A-Za-z_]* | *[!A-Za-z0-9_]*) finish failed 1 "manifest.json: preset $(quoted "$preset"): want a preset name" ;;
esac
case $binary in
/*) ;;
*) finish failed 1 "manifest.json: binary $(quoted "$binary"): want an absolute path" ;;
esac
# hex64 V: V is 64 lowercase hex digits.
hex64() {
	case $1 in *[!0-9a-f]*) return 1 ;; esac
	[ ${#1} -eq 64 ]
}
if [ -n "$pin" ] && ! hex64 "$pin"; then
	finish failed 1 "manifest.json: sha256 $(quoted "$pin"): want 64 hex digits"
fi
if [ -n "$policy" ] && ! hex64 "${policy#sha256:}"; then
	finish failed 1 "manifest.json: policy_sha256 $(quoted "$policy"): want sha256: and 64 hex digits"
fi
[ -x "$binary" ] || finish failed 1 "binary $binary is not an executable file on this runner"
if [ -n "$pin" ]; then
	echo "$pin  $binary" | sha256sum -c --status - ||
		finish failed 1 "binary $binary does not have the pinned sha256 $pin (it has $(sha256sum "$binary" | cut -d' ' -f1))"
fi

# arg I and envvar I set val to arg I, env I (NAME=VALUE) of the manifest,
# exactly: jq prints a terminator the command substitution cannot strip,
# so a trailing newline of the value stays.
arg() {
	val=$(jq -j --argjson i "$1" '.args[$i], "."' "$manifest")
	val=${val%.}
}
envvar() {
	val=$(jq -j --argjson i "$1" '(.env | to_entries)[$i] | .key, "=", .value, "."' "$manifest")
	val=${val%.}
}

mkdir -p "$dir/work"
airlock=${AIRLOCK_RUNNER_AIRLOCK:-$(command -v airlock || true)}
root=$PWD
set -- timeout -k 10 "$secs"
if [ -n "$airlock" ]; then
	[ -n "$policy" ] || finish failed 1 "manifest.json has no policy_sha256: refusing to run under a bundle nobody pinned"
	# The sandbox's user may pass through the checkout to spawns/<id>/,
	# read that and write only its work/: the rest of the checkout, .git
	# above all, is beyond its reach (Landlock grants spawns/<id> only,
	# too), and the logs, audit log and result beside work/ beyond its
	# writing.
	chmod -R go-rwx .git
	chmod a+x "$work" "$root" "$root/spawns"
	chmod -R a+rX "$dir"
	chmod a+rwx "$dir/work"
	set -f # the runner's own flags are split at blanks, never globbed
	# shellcheck disable=SC2086
	set -- "$@" "$airlock" launch ${AIRLOCK_RUNNER_LAUNCH_ARGS:-} --preset "$preset" --kind="$kind" --policy-sha256 "$policy" \
		--audit-log "$dir/audit.jsonl" --sandbox-id "spawn-$id" --cwd "$root" --ro "$root/$dir" \
		--rw "$root/$dir/work" --exec "$binary"
	set +f
	i=0
	while [ "$i" -lt "$nenv" ]; do
		envvar "$i"
		set -- "$@" --env "$val"
		i=$((i + 1))
	done
	set -- "$@" -- "$binary"
else
	[ "${AIRLOCK_RUNNER_ALLOW_UNSANDBOXED:-}" = 1 ] ||
		finish failed 1 "airlock is not on this runner: refusing to run the sub-agent without a sandbox (AIRLOCK_RUNNER_ALLOW_UNSANDBOXED=1 runs it plainly, with the remote's credentials and the runner's within its reach)"
	warning="WARNING: airlock is not on this runner: the sub-agent ran WITHOUT a sandbox and WITHOUT its preset's egress policy ($preset)"
	echo "airlock-spawn-runner: $warning" >&2
	set -- "$@" "$binary"
fi
i=0
while [ "$i" -lt "$nargs" ]; do
	arg "$i"
	set -- "$@" "$val"
	i=$((i + 1))
done

set +e
(
	if [ -z "$airlock" ]; then
		i=0
		while [ "$i" -lt "$nenv" ]; do
			envvar "$i"
			export "$val"
			i=$((i + 1))
		done
	fi
	exec "$@"
) </dev/null >"$dir/stdout.log" 2>"$dir/stderr.log"
rc=$?
set -e

# The last line that is not blank, as the local substrate reads it.
grep -v '^[[:space:]]*$' "$dir/stdout.log" | tail -n 1 >"$work/last" || true
# Exactly one JSON value, an object: a line like `{} {}` is not a result.
if jq -se 'length == 1 and (.[0] | type == "object")' "$work/last" >/dev/null 2>&1; then
	cp "$work/last" "$resultfile"
	tokens=$(jq -r '.usage.tokens | if type == "number" and . >= 0 and . == floor then tostring else empty end' "$resultfile")
fi
if [ "$rc" -eq 124 ]; then
	finish timeout 124 "timed out after $secs s: killed"
elif [ "$rc" -ne 0 ]; then
	said=$(grep -v '^[[:space:]]*$' "$dir/stderr.log" | tail -n 1 | cut -c 1-200 || true)
	finish failed "$rc" "exited $rc: $said"
elif [ ! -s "$resultfile" ]; then
	finish failed 0 "the last stdout line is not a JSON object"
fi
finish done 0 ""
