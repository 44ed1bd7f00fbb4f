package devcluster

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// writeServiceAccountKeys creates the key pair kube-apiserver signs service
// account tokens with, unless it exists already.
func writeServiceAccountKeys(dir string) (keyPath, pubPath string, err error) {
	keyPath = filepath.Join(dir, "sa.key")
	pubPath = filepath.Join(dir, "sa.pub")
	if fileExists(keyPath) && fileExists(pubPath) {
		return keyPath, pubPath, nil
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return "", "", fmt.Errorf("generate service account key: %w", err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return "", "", fmt.Errorf("marshal service account public key: %w", err)
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		return "", "", fmt.Errorf("write %s: %w", keyPath, err)
	}
	if err := os.WriteFile(pubPath, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644); err != nil {
		return "", "", fmt.Errorf("write %s: %w", pubPath, err)
	}
	return keyPath, pubPath, nil
}

// writeTokenFile creates a static token file with one system:masters user and
// returns its path and the token, reusing an existing token.
func writeTokenFile(dir string) (path, token string, err error) {
	path = filepath.Join(dir, "tokens.csv")
	tokenPath := filepath.Join(dir, "admin.token")
	if data, err := os.ReadFile(tokenPath); err == nil && len(data) > 0 && fileExists(path) {
		return path, string(data), nil
	}
	buf := make([]byte, 16)
	if _, err := rand.Read(buf); err != nil {
		return "", "", fmt.Errorf("generate admin token: %w", err)
	}
	token = hex.EncodeToString(buf)
	if err := os.WriteFile(path, []byte(token+",molt-admin,molt-admin,system:masters\n"), 0o600); err != nil {
		return "", "", fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.WriteFile(tokenPath, []byte(token), 0o600); err != nil {
		return "", "", fmt.Errorf("write %s: %w", tokenPath, err)
	}
	return path, token, nil
}

// kubeconfigYAML renders a kubeconfig for the admin token. The API server's
// certificate is self-signed, so TLS verification is skipped: this is a
// loopback-only development cluster.
func kubeconfigYAML(server, token string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: molt-local
  cluster:
    server: %s
    insecure-skip-tls-verify: true
users:
- name: molt-admin
  user:
    token: %s
contexts:
- name: molt-local
  context:
    cluster: molt-local
    user: molt-admin
current-context: molt-local
`, server, token)
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, os.ErrNotExist)
}
