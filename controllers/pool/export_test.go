package pool

import (
	"context"

	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
)

// StaleEnactmentsRead is staleEnactmentsRead, for tests.
const StaleEnactmentsRead = staleEnactmentsRead

// EnactmentsFromAPI is enactmentsFromAPI, for tests.
func (r *Reconciler) EnactmentsFromAPI(ctx context.Context) ([]nncev1beta1.NodeNetworkConfigurationEnactment, error) {
	return r.enactmentsFromAPI(ctx)
}

// EnactmentsListed is enactmentsListed, for tests.
func (r *Reconciler) EnactmentsListed(ctx context.Context) ([]nncev1beta1.NodeNetworkConfigurationEnactment, error) {
	return r.enactmentsListed(ctx)
}
