package events_test

import (
	"testing"

	"github.com/heedhq/heed/events"
)

func TestTokenRoundTripsAndIsSubjectSafe(t *testing.T) {
	for _, s := range []string{"alice", "user:alice", "a.b*c>d e", "=3A", "ünï", "agent/session-1_x", ""} {
		tok := events.Token(s)
		for i := 0; i < len(tok); i++ {
			c := tok[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '=') {
				t.Errorf("Token(%q) = %q has %q", s, tok, c)
			}
		}
		back, ok := events.ParseToken(tok)
		if !ok || back != s {
			t.Errorf("ParseToken(Token(%q)) = %q, %v", s, back, ok)
		}
	}
	if got := events.PresenceSubject("user:alice"); got != "heed.presence.user=3Aalice" {
		t.Errorf("PresenceSubject = %q", got)
	}
	for _, bad := range []string{"=3a", "=3", "a=G1", "=41"} { // lower case, short, not hex, escaped letter
		if _, ok := events.ParseToken(bad); ok {
			t.Errorf("ParseToken(%q) accepted", bad)
		}
	}
}

func TestOfferOfConfirmID(t *testing.T) {
	id := events.ConfirmIDOfOffer("esc-1-o2", 12)
	if esc, n, ok := events.OfferOfConfirmID(id); !ok || esc != "esc-1-o2" || n != 12 {
		t.Errorf("OfferOfConfirmID(%q) = %q %d %v", id, esc, n, ok)
	}
	for _, bad := range []string{"r1-s2-a1", "e-o", "e-o0", "e-o01", "-o1", "e-ox"} {
		if _, _, ok := events.OfferOfConfirmID(bad); ok {
			t.Errorf("OfferOfConfirmID(%q) accepted", bad)
		}
	}
}
