package ippool

import (
	"encoding/binary"
	"net/netip"
)

// u128 is an address as an unsigned 128-bit integer, so IPv4 and IPv6 share
// one arithmetic. IPv4 addresses use the low 32 bits.
type u128 struct{ hi, lo uint64 }

func fromAddr(a netip.Addr) u128 {
	if a.Is4() {
		b := a.As4()
		return u128{lo: uint64(binary.BigEndian.Uint32(b[:]))}
	}
	b := a.As16()
	return u128{hi: binary.BigEndian.Uint64(b[:8]), lo: binary.BigEndian.Uint64(b[8:])}
}

func (u u128) addr(is4 bool) netip.Addr {
	if is4 {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], uint32(u.lo))
		return netip.AddrFrom4(b)
	}
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], u.hi)
	binary.BigEndian.PutUint64(b[8:], u.lo)
	return netip.AddrFrom16(b)
}

func (u u128) cmp(v u128) int {
	switch {
	case u.hi < v.hi:
		return -1
	case u.hi > v.hi:
		return 1
	case u.lo < v.lo:
		return -1
	case u.lo > v.lo:
		return 1
	}
	return 0
}

// sub returns u - v; the caller guarantees u >= v.
func (u u128) sub(v u128) u128 {
	lo := u.lo - v.lo
	borrow := uint64(0)
	if u.lo < v.lo {
		borrow = 1
	}
	return u128{hi: u.hi - v.hi - borrow, lo: lo}
}

// add returns u + x; the caller guarantees no overflow past 128 bits.
func (u u128) add(x uint64) u128 {
	lo := u.lo + x
	carry := uint64(0)
	if lo < u.lo {
		carry = 1
	}
	return u128{hi: u.hi + carry, lo: lo}
}
