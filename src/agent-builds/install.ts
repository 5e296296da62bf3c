/**
 * GET /install.sh: the installer a new machine runs (`curl -fsSL URL/install.sh | sh -s -- --token
 * hme.…`). POSIX sh; no secret in it: only this deployment's origin, filled in per request, so it
 * downloads the build from where it was itself served. The systemd unit is the packaging's own
 * file (agent/packaging/harbormaster-agent.service), bundled as text (wrangler.toml's Text rule),
 * so the .deb and install.sh install the same unit; only the binary's path differs
 * (/usr/local/bin here, /usr/bin in the .deb), rewritten below.
 */
import unitText from "../../agent/packaging/harbormaster-agent.service";

const INSTALLED_BINARY = "/usr/local/bin/harbormaster-agent";
const UNIT_DELIMITER = "HARBORMASTER_AGENT_UNIT";

/** The unit as install.sh writes it: ExecStart (and any other mention) naming the installed binary. */
export function installedUnit(unit = unitText): string {
  const text = unit.replaceAll("/usr/bin/harbormaster-agent", INSTALLED_BINARY);
  if (text.split("\n").includes(UNIT_DELIMITER)) throw new Error("the unit holds the here-document's delimiter");
  return text.endsWith("\n") ? text : `${text}\n`;
}

export function installScript(origin: string): string {
  if (!/^https?:\/\/[A-Za-z0-9.:[\]-]+$/.test(origin)) throw new Error(`not an origin: ${origin}`);
  // Replaced by functions: a replacement string would read `$&` and the like in the unit's text.
  return SCRIPT.replaceAll("__HM_URL__", () => origin).replace("__UNIT__", () => installedUnit());
}

const SCRIPT = `#!/bin/sh
# Harbormaster agent installer (POSIX sh), served by __HM_URL__/install.sh.
#
#   curl -fsSL __HM_URL__/install.sh | sh -s -- --token hme.<id>.<secret>
#
# Downloads this deployment's agent build for this machine, checks its SHA-256, installs it as
# /usr/local/bin/harbormaster-agent with its systemd unit, joins the fleet with the enrollment
# token (harbormaster-agent join) and starts the service. Options:
#   --token hme.…         the fleet's enrollment token (without it: install only, join later)
#   --hostname NAME       the name to enroll under (default: this machine's hostname)
#   --fleetlock-id ID     the FleetLock id its reboot client sends (default: the agent's choice)
#   --prefix DIR          install under DIR (a root to package or test into); default /
#   --no-start            install (and join), but do not enable or start the service
set -eu

HM_URL='__HM_URL__'
TOKEN=''
HOST_NAME=''
FLEETLOCK_ID=''
PREFIX=''
START=1

say() { printf 'install.sh: %s\\n' "$*" >&2; }
die() { say "$*"; exit 1; }
value() { if [ "$#" -lt 2 ] || [ -z "$2" ]; then die "$1 needs a value"; fi; }
usage() {
  cat <<'USAGE'
usage: install.sh [--token hme.…] [--hostname NAME] [--fleetlock-id ID] [--prefix DIR] [--no-start]
  curl -fsSL URL/install.sh | sh -s -- --token hme.<id>.<secret>
USAGE
}

while [ "$#" -gt 0 ]; do
  case "$1" in
    --token) value "$@"; TOKEN=$2; shift 2 ;;
    --token=*) TOKEN=\${1#*=}; shift ;;
    --hostname) value "$@"; HOST_NAME=$2; shift 2 ;;
    --hostname=*) HOST_NAME=\${1#*=}; shift ;;
    --fleetlock-id) value "$@"; FLEETLOCK_ID=$2; shift 2 ;;
    --fleetlock-id=*) FLEETLOCK_ID=\${1#*=}; shift ;;
    --prefix) value "$@"; PREFIX=$2; shift 2 ;;
    --prefix=*) PREFIX=\${1#*=}; shift ;;
    --no-start) START=0; shift ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; die "unknown option: $1" ;;
  esac
done

case "$TOKEN" in
  '') ;;
  hme.*) ;;
  *) die "--token takes an enrollment token (hme.…), created with: hm enroll-tokens create FLEET" ;;
esac
PREFIX=\${PREFIX%/}
if [ -z "$PREFIX" ] && [ "$(id -u)" != 0 ]; then die "run as root (or with --prefix DIR)"; fi

os=$(uname -s | tr '[:upper:]' '[:lower:]')
case "$os" in
  linux) ;;
  *) die "no agent build for $os" ;;
esac
case "$(uname -m)" in
  x86_64|amd64) arch=x64 ;;
  aarch64|arm64) arch=arm64 ;;
  *) die "no agent build for $(uname -m)" ;;
esac
target="$os-$arch"

fetch() {
  if command -v curl >/dev/null 2>&1; then
    curl -fsSL --retry 3 -o "$2" "$1"
  elif command -v wget >/dev/null 2>&1; then
    wget -q -O "$2" "$1"
  else
    die "curl or wget is needed"
  fi
}
command -v sha256sum >/dev/null 2>&1 || die "sha256sum is needed"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM HUP

say "downloading the agent for $target from $HM_URL"
fetch "$HM_URL/v1/agent/download/$target.sha256" "$tmp/sha256" || die "no agent build for $target at $HM_URL (publish one with: hm agent publish FILE --os $os --arch $arch)"
fetch "$HM_URL/v1/agent/download/$target" "$tmp/harbormaster-agent" || die "downloading the build failed"
expected=$(cut -d ' ' -f 1 "$tmp/sha256")
actual=$(sha256sum "$tmp/harbormaster-agent" | cut -d ' ' -f 1)
if [ "$expected" != "$actual" ]; then
  die "the download's SHA-256 is $actual, not $expected as published: nothing was installed"
fi

bin_dir="$PREFIX/usr/local/bin"
unit_dir="$PREFIX/etc/systemd/system"
mkdir -p "$bin_dir" "$unit_dir"
# A new file renamed over the old one: a running agent keeps its binary, a crash leaves no half file.
cp "$tmp/harbormaster-agent" "$bin_dir/.harbormaster-agent.new"
chmod 0755 "$bin_dir/.harbormaster-agent.new"
mv -f "$bin_dir/.harbormaster-agent.new" "$bin_dir/harbormaster-agent"
cat > "$unit_dir/.harbormaster-agent.service.new" <<'HARBORMASTER_AGENT_UNIT'
__UNIT__HARBORMASTER_AGENT_UNIT
chmod 0644 "$unit_dir/.harbormaster-agent.service.new"
mv -f "$unit_dir/.harbormaster-agent.service.new" "$unit_dir/harbormaster-agent.service"
say "installed $bin_dir/harbormaster-agent and $unit_dir/harbormaster-agent.service"

if [ -n "$TOKEN" ]; then
  set -- join "$HM_URL" "$TOKEN"
  if [ -n "$HOST_NAME" ]; then set -- "$@" --hostname "$HOST_NAME"; fi
  if [ -n "$FLEETLOCK_ID" ]; then set -- "$@" --fleetlock-id "$FLEETLOCK_ID"; fi
  "$bin_dir/harbormaster-agent" "$@" || die "harbormaster-agent join failed (run it again: a retry from this machine is safe)"
else
  say "not joined: run  harbormaster-agent join $HM_URL hme.<id>.<secret>"
fi

if [ "$START" = 1 ] && [ -n "$TOKEN" ] && command -v systemctl >/dev/null 2>&1; then
  systemctl daemon-reload
  systemctl enable --now harbormaster-agent
  say "harbormaster-agent is running (journalctl -u harbormaster-agent)"
fi
`;
