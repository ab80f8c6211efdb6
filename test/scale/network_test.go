package scale

import (
	"context"
	"sync"
)

// baseState is a node's network before any policy: eth0 with its DHCP
// address, and an unconfigured eth1.
const baseState = `{"interfaces":[` +
	`{"name":"eth0","type":"ethernet","state":"up","ipv4":{"enabled":true,"dhcp":true,"address":[{"ip":"192.168.122.10","prefix-length":24}]}},` +
	`{"name":"eth1","type":"ethernet","state":"up"}]}`

// memNetwork is a node's network in memory: Show returns the last state
// applied (the base state at first), Apply stores it.
type memNetwork struct {
	mu    sync.Mutex
	state []byte
}

func (m *memNetwork) Show(context.Context) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.state == nil {
		return []byte(baseState), nil
	}
	return m.state, nil
}

func (m *memNetwork) Apply(_ context.Context, desired []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.state = append([]byte(nil), desired...)
	return nil
}
