package validate

import (
	"fmt"
	"net/netip"
	"strings"
)

// serverKeys checks the keys potato-server reads: each trusted proxy is an
// address or a CIDR prefix, and not one that covers more than a private
// network (a warning), each allowed host a name.
func (ch *checker) serverKeys() {
	t := ch.c.Training
	for _, p := range t.TrustedProxies {
		pre, err := ParseProxy(p)
		if err != nil {
			ch.errorf(ch.line("trusted_proxies"), "model_training.trusted_proxies", "", "model_training.trusted_proxies: %q is not an IP address or a CIDR prefix such as 10.0.0.0/8", p)
			continue
		}
		if what := tooWide(pre); what != "" {
			ch.warnf(ch.line("trusted_proxies"), "model_training.trusted_proxies", "", proxyTooWide, p, what)
		}
	}
	for _, h := range t.AllowedHosts {
		if h == "" || strings.ContainsAny(h, "/: \t") {
			ch.errorf(ch.line("allowed_hosts"), "model_training.allowed_hosts", "", "model_training.allowed_hosts: %q is not a host name (no scheme, port or path)", h)
		}
	}
}

// proxyTooWide warns of a trusted proxy prefix that covers more than a
// private network: every client in it may write the address it likes in
// X-Forwarded-For, and potato-server logs that address and counts wrong
// API keys by it, so such a client escapes the lockout.
const proxyTooWide = "model_training.trusted_proxies: %q trusts %s as a reverse proxy, so a client there can write any address in X-Forwarded-For, " +
	"and the server logs it and counts wrong API keys by it; list the proxies' own addresses, or a prefix of /8 or longer (IPv6: /16 or longer)"

// ulaPrefix is IPv6's unique local block, the counterpart of 10.0.0.0/8.
var ulaPrefix = netip.MustParsePrefix("fc00::/7")

// tooWide says which addresses a trusted proxy prefix covers when that is
// more than a private network has: an IPv4 prefix shorter than /8 (the
// largest private block, 10.0.0.0/8, is a /8), an IPv6 prefix shorter
// than /16 outside the unique local block fc00::/7. "" for any other.
func tooWide(p netip.Prefix) string {
	v, least := "IPv4", 8
	if p.Addr().Is6() {
		v, least = "IPv6", 16
		if p.Bits() >= ulaPrefix.Bits() && ulaPrefix.Contains(p.Addr()) {
			return ""
		}
	}
	switch {
	case p.Bits() >= least:
		return ""
	case p.Bits() == 0:
		return "every " + v + " address"
	}
	return fmt.Sprintf("every %s address in a /%d", v, p.Bits())
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
