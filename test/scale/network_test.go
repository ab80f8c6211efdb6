package scale

import (
	"context"
	"errors"
	"sync"
)

// baseState is a node's network before any policy: eth0 with its DHCP
// address, and an unconfigured eth1.
const baseState = `{"interfaces":[` +
	`{"name":"eth0","type":"ethernet","state":"up","ipv4":{"enabled":true,"dhcp":true,"address":[{"ip":"192.168.122.10","prefix-length":24}]}},` +
	`{"name":"eth1","type":"ethernet","state":"up"}]}`

// memNetwork is a node's network in memory: Show returns the last state
// committed (the base state at first), Apply keeps a state until Commit
// or Rollback.
type memNetwork struct {
	mu             sync.Mutex
	state, pending []byte
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
	m.pending = append([]byte(nil), desired...)
	return nil
}

func (m *memNetwork) Commit(context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.pending == nil {
		return errors.New("no checkpoint to commit")
	}
	m.state, m.pending = m.pending, nil
	return nil
}

func (m *memNetwork) Rollback(context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.pending == nil {
		return errors.New("no checkpoint to roll back")
	}
	m.pending = nil
	return nil
}
