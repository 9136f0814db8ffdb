#!/usr/bin/env bash
# Builds a signer from dmwm/cmsauth's own Go code (the CMSWEB front end's: SetCMSHeaders + GetHmac), for
# the vectors in test/fixtures/cmsauth/ (see its README), and a front end: a reverse proxy signing as CMSWEB's
# auth-proxy-server does:
#   cmsauth-signer.sh            prints the path of the built signer (built once into test/.servers/cmsauth)
#   cmsauth-signer.sh front-end  prints the path of the built front end (built with the signer)
# The source is the three Go files of https://github.com/dmwm/cmsauth at COMMIT kept in test/fixtures/cmsauth/src
# (MIT, its LICENSE beside them; checked against COMMIT's git blob ids below), or the folder $CMSAUTH_SRC (a
# checkout of it, to build another commit's files). utils.go needs github.com/vkuznet/x509proxy, which cannot be
# fetched here: its one function using it, TlsCerts (client certificates, nothing to do with signing), is
# stubbed. Needs Debian's golang-go (installed here when missing).
#   signer < request.json > headers.json
# request.json: {"key_file": PATH, "path": URL path, "headers": {the client's own headers},
#                "user": {name, cern_upn, dn, ...}, "cric": {sorted DN: {"DN": ..., "Roles": {role: [scope]}}}}
# headers.json: every request header after SetCMSHeaders, as the back end receives them ({name: value}).
#   front-end LISTEN BACKEND_URL KEY_FILE USERS_JSON
# USERS_JSON: {"<name>": {"user": {...}, "cric": {...}}}. A client names its user in `X-Test-User` (standing for
# the certificate or token the real front end checks; removed before forwarding); any other header it sends is
# forwarded and signed with the rest, as by the real one; an unknown name: 401. Proxied by Go's
# httputil.ReverseProxy (it appends the client to X-Forwarded-For and streams bodies as they come).
set -euo pipefail
COMMIT=ce1b94285adf22ba6d20ee122969164e8ce60355
HERE="$(cd "$(dirname "$0")/../.." && pwd)"
OUT="$HERE/test/.servers/cmsauth"
BIN="$OUT/signer-$COMMIT"
FRONT_END="$OUT/front-end-$COMMIT"
if [ "${1:-}" = front-end ]; then WANTED="$FRONT_END"; else WANTED="$BIN"; fi
if [ -x "$BIN" ] && [ -x "$FRONT_END" ]; then echo "$WANTED"; exit 0; fi
command -v go >/dev/null || {
    apt-get -o DPkg::Lock::Timeout=600 update -qq
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends golang-go
}
mkdir -p "$OUT"
BUILD="$(mktemp -d "$OUT/build.XXXXXX")"
trap 'rm -rf "$BUILD"' EXIT
if [ -n "${CMSAUTH_SRC:-}" ]; then
    git -C "$CMSAUTH_SRC" archive "$COMMIT" authz.go cric.go utils.go | tar -x -C "$BUILD"
else
    KEPT="$HERE/test/fixtures/cmsauth/src"
    # git blob ids of COMMIT's files: the kept copy is cmsauth's, unedited
    for pair in authz.go:808afe3c6fc18fbc32d0c891b979212f231a3ded cric.go:5f833946e945abd540b025bf203153464391eb00 \
                utils.go:320acc839eb0dc1ba7ca9e9aeeea8237447fcb80; do
        file="${pair%%:*}"; want="${pair##*:}"
        got="$(git hash-object "$KEPT/$file")"
        [ "$got" = "$want" ] || { echo "$KEPT/$file is not dmwm/cmsauth's at $COMMIT (blob $got, want $want)" >&2; exit 1; }
        cp "$KEPT/$file" "$BUILD/"
    done
fi
mkdir -p "$BUILD/cmsauth"
mv "$BUILD"/*.go "$BUILD/cmsauth/"
python3 - "$BUILD/cmsauth/utils.go" <<'EOF'
import sys
path = sys.argv[1]
src = open(path).read()
src = src.replace('\n\t"github.com/vkuznet/x509proxy"\n', "\n")
start = src.index("func TlsCerts() ([]tls.Certificate, error) {")
end = src.index("\n}\n", start) + 3
stub = ('func TlsCerts() ([]tls.Certificate, error) {\n'
        '\treturn nil, fmt.Errorf("TlsCerts stubbed: x509proxy is not available to this build")\n}\n')
src = src[:start] + stub + src[end:]
src = src.replace('\t"os/user"\n', "")  # only TlsCerts used it
open(path, "w").write(src)
EOF
cat > "$BUILD/go.mod" <<'EOF'
module msunmerged/cmsauthsigner

go 1.19
EOF
mkdir -p "$BUILD/signer" "$BUILD/frontend"
cat > "$BUILD/signer/main.go" <<'EOF'
package main

import (
	"encoding/json"
	"net/http"
	"os"

	"msunmerged/cmsauthsigner/cmsauth"
)

type request struct {
	KeyFile string                       `json:"key_file"`
	Path    string                       `json:"path"`
	Headers map[string]string            `json:"headers"`
	User    map[string]interface{}       `json:"user"`
	Cric    map[string]cmsauth.CricEntry `json:"cric"`
}

func main() {
	var in request
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		panic(err)
	}
	r, err := http.NewRequest("POST", "http://back-end"+in.Path, nil)
	if err != nil {
		panic(err)
	}
	for k, v := range in.Headers {
		r.Header.Set(k, v)
	}
	var auth cmsauth.CMSAuth
	auth.Init(in.KeyFile)
	auth.SetCMSHeaders(r, in.User, cmsauth.CricRecords(in.Cric), false)
	out := map[string]string{}
	for k := range r.Header {
		out[k] = r.Header.Get(k)
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		panic(err)
	}
}
EOF
cat > "$BUILD/frontend/main.go" <<'EOF'
package main

import (
	"encoding/json"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"

	"msunmerged/cmsauthsigner/cmsauth"
)

type identity struct {
	User map[string]interface{}       `json:"user"`
	Cric map[string]cmsauth.CricEntry `json:"cric"`
}

func main() {
	listen, backend, keyFile, usersFile := os.Args[1], os.Args[2], os.Args[3], os.Args[4]
	target, err := url.Parse(backend)
	if err != nil {
		log.Fatal(err)
	}
	data, err := os.ReadFile(usersFile)
	if err != nil {
		log.Fatal(err)
	}
	var users map[string]identity
	if err := json.Unmarshal(data, &users); err != nil {
		log.Fatal(err)
	}
	var auth cmsauth.CMSAuth
	auth.Init(keyFile)
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.Transport = &http.Transport{MaxIdleConnsPerHost: 100}
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		id, ok := users[r.Header.Get("X-Test-User")]
		r.Header.Del("X-Test-User")
		if !ok {
			http.Error(w, "unknown user", http.StatusUnauthorized)
			return
		}
		auth.SetCMSHeaders(r, id.User, cmsauth.CricRecords(id.Cric), false)
		proxy.ServeHTTP(w, r)
	})
	log.Fatal(http.ListenAndServe(listen, nil))
}
EOF
export GOFLAGS=-mod=mod GOPROXY=off GOCACHE="$OUT/gocache" GOPATH="$OUT/gopath"
(cd "$BUILD" && go build -o "$BIN" ./signer && go build -o "$FRONT_END" ./frontend)
echo "$WANTED"
