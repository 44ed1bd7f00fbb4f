package devcluster

// ControlPlaneAuth are the files the control plane authenticates with: the
// service-account key pair (kube-apiserver signs tokens with SAKey and
// checks them with SAPub; kube-controller-manager signs with SAKey) and the
// static token file with one system:masters user, whose token is Token.
type ControlPlaneAuth struct {
	SAKey, SAPub, TokenFile, Token string
}

// WriteControlPlaneAuth makes the control plane's keys and admin token in
// dir, keeping those that exist: the same files Start makes, for a control
// plane started elsewhere (docker-compose.yaml's init container).
func WriteControlPlaneAuth(dir string) (ControlPlaneAuth, error) {
	key, pub, err := writeServiceAccountKeys(dir)
	if err != nil {
		return ControlPlaneAuth{}, err
	}
	tokens, token, err := writeTokenFile(dir)
	if err != nil {
		return ControlPlaneAuth{}, err
	}
	return ControlPlaneAuth{SAKey: key, SAPub: pub, TokenFile: tokens, Token: token}, nil
}

// KubeconfigYAML is the admin kubeconfig of server with token (see
// kubeconfigYAML: TLS verification is skipped, the certificate is
// self-signed).
func KubeconfigYAML(server, token string) string { return kubeconfigYAML(server, token) }
