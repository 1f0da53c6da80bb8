package validate

import (
	"net/netip"
	"strings"
)

// serverKeys checks the keys potato-server reads: each trusted proxy is an
// address or a CIDR prefix, each allowed host a name.
func (ch *checker) serverKeys() {
	t := ch.c.Training
	for _, p := range t.TrustedProxies {
		if _, err := ParseProxy(p); err != nil {
			ch.errorf(ch.line("trusted_proxies"), "model_training.trusted_proxies", "", "model_training.trusted_proxies: %q is not an IP address or a CIDR prefix such as 10.0.0.0/8", p)
		}
	}
	for _, h := range t.AllowedHosts {
		if h == "" || strings.ContainsAny(h, "/: \t") {
			ch.errorf(ch.line("allowed_hosts"), "model_training.allowed_hosts", "", "model_training.allowed_hosts: %q is not a host name (no scheme, port or path)", h)
		}
	}
}

// ParseProxy reads an entry of model_training.trusted_proxies: an address
// (a prefix of its full length) or a CIDR prefix.
func ParseProxy(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		return p.Masked(), err
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}
