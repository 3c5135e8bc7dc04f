#!/usr/bin/env bash
# Writes a self-signed CA, the API server's serving certificate and the
# ServiceAccount signing key pair into DIR (usage: pki.sh DIR).
set -euo pipefail
dir=$1
mkdir -p "$dir"; cd "$dir"
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
