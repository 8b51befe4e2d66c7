#!/bin/sh
# One-shot provisioning of the cluster deployment's state: the `init` service
# of docker-compose.yml runs it before anything else starts.
#
# The two gates must act as one gate: the same gate key (the connectors take
# only orders a gate key of the release signed; during a rotation one gate may
# sign with the next key, docs/OPERATIONS.md "Key rotation"), the same tenant
# pseudonym key (it also keys the gates' stage calls to each other), the same
# registry and the same release trust root and release. What a gate writes must stay its
# own: ledger, claim and approval databases, release state, the `up` lock. So
# each service gets its own state directory under $SMF_STATE_ROOT, holding
# copies of the identity files it needs from one seed state directory:
#
#   seed        provisioned once by `smf-assurance demo`, which also runs the
#               demo scenarios on an embedded nats-server with that identity
#   gate-1/2    registry, release trust root and releases, gate key and bus
#               credential, tenant pseudonym key
#   connectors  registry, the two example connectors' keys and bus credentials
#   bus-follow  registry, release trust root, the operator's and the system
#               account's bus credentials (it reloads the nodes' authorization)
#   model-gateway  registry, the gateway's key and bus credential, and its
#               settings naming the provider ($SMF_MODEL_UPSTREAM); runtimes
#               are added to it with `model-gateway add-runtime`
#
# The bus authorization the NATS nodes include (issue 15) is written from the
# seed's registry into $SMF_NATS_AUTH_DIR before any node starts, and the nodes'
# TLS (issue 39) into $SMF_NATS_TLS_DIR.
#
# The approver, runtime and release-signing keys stay in the seed. A directory
# that already has its registry is complete (the registry is copied last) and
# is left alone, so running this again changes nothing.
set -eu
# Every state folder and file private to this user: a gate refuses to start on a
# store folder or file others may read (its content is a firm's evidence).
umask 077

root="${SMF_STATE_ROOT:-/var/lib/smf}"
auth="${SMF_NATS_AUTH_DIR:-/etc/nats/auth}"
seed="$root/seed"

if [ ! -e "$seed/registry.json" ]; then
    smf-assurance demo --state-dir "$seed"
fi
mkdir -p "$auth"
smf-assurance bus authorization --state-dir "$seed" --out "$auth/authorization.conf"

# The bus's TLS (issue 39): a CA and the nodes' certificate for the names the
# services reach them by, and the console's and model gateway's certificates, once.
# The CA's key is kept with the seed's keys, off the nodes' volume; its certificate
# is what every client trusts (SMF_NATS_CA, and for HTTPS).
tls="${SMF_NATS_TLS_DIR:-/etc/nats/tls}"
if [ ! -e "$tls/ca.pem" ]; then
    smf-assurance tls init --out "$tls" --host nats-1 --host nats-2 --host nats-3
    # the console's and the model gateway's HTTPS, each its own key
    smf-assurance tls issue --ca "$tls" --name console --host console --out "$seed/tls"
    smf-assurance tls issue --ca "$tls" --name model-gateway --host model-gateway \
        --out "$root/model-gateway/tls"
    mv "$tls/ca-key.pem" "$seed/keys/bus-ca-key.pem"
fi
cp "$tls/ca.pem" "$root/bus-ca.pem"
chmod 644 "$root/bus-ca.pem"

# provision NAME PATH... : copy PATHs (relative to the seed) into $root/NAME
provision() {
    target="$root/$1"
    shift
    if [ -e "$target/registry.json" ]; then
        return 0
    fi
    mkdir -p "$target"
    mkdir -p -m 700 "$target/keys"
    for item in "$@"; do
        cp -Rp "$seed/$item" "$(dirname "$target/$item")/"
    done
}

for gate in gate-1 gate-2; do
    provision "$gate" keys/gate.key keys/gate.nkey keys/tenant-pseudonym.key \
        release-trust-root.json releases registry.json
done
provision connectors keys/court-efiling.key keys/court-efiling.nkey \
    keys/dms.key keys/dms.nkey registry.json
provision bus-follow keys/operator.nkey keys/bus-system.nkey \
    release-trust-root.json registry.json
provision model-gateway keys/model-gateway.key keys/model-gateway.nkey registry.json
if [ ! -e "$root/model-gateway/model-gateway.json" ]; then
    smf-assurance model-gateway upstream "${SMF_MODEL_UPSTREAM:-http://model-provider:8000/v1}" \
        --provider "${SMF_MODEL_PROVIDER:-local-model}" --state-dir "$root/model-gateway"
fi
