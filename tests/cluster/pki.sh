#!/usr/bin/env bash
# Writes a self-signed CA, the API server's serving certificate, the
# ServiceAccount signing key pair, and the aggregation layer's front-proxy CA and
# client certificate into DIR (usage: pki.sh DIR).
set -euo pipefail
dir=$1
mkdir -p "$dir"; cd "$dir"
front_proxy() {
  # The API server presents this client certificate when it proxies a request to an
  # aggregated API (kite operator's logs); the extension trusts only this CA.
  openssl req -x509 -newkey rsa:2048 -nodes -keyout front-proxy-ca.key -out front-proxy-ca.crt \
    -days 3650 -subj "/CN=kite-front-proxy-ca" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -keyout front-proxy-client.key -out front-proxy-client.csr \
    -subj "/CN=front-proxy-client" 2>/dev/null
  printf 'extendedKeyUsage=clientAuth\nkeyUsage=digitalSignature,keyEncipherment\n' >front-proxy-client.ext
  openssl x509 -req -in front-proxy-client.csr -CA front-proxy-ca.crt -CAkey front-proxy-ca.key \
    -CAcreateserial -out front-proxy-client.crt -days 3650 -extfile front-proxy-client.ext 2>/dev/null
  chmod 600 ./*.key
}
[ -f front-proxy-ca.crt ] || front_proxy
[ -f ca.crt ] && exit 0
openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 \
  -subj "/CN=kite-local-ca" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr \
  -subj "/CN=kube-apiserver" 2>/dev/null
cat >apiserver.ext <<EXT
subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local
extendedKeyUsage=serverAuth
keyUsage=digitalSignature,keyEncipherment
EXT
openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
  -out apiserver.crt -days 3650 -extfile apiserver.ext 2>/dev/null
openssl genrsa -out sa.key 2048 2>/dev/null
openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
chmod 600 ./*.key
