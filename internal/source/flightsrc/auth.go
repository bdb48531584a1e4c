package flightsrc

import (
	"context"
	"errors"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/weir-io/weir/internal/httpin"
)

// authorize checks the call's "authorization: Bearer <token>" metadata
// for the push scope, when the source has tokens.
func (s *Source) authorize(ctx context.Context) error {
	if s.opts.Tokens == nil {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	var tok string
	for _, v := range md.Get("authorization") {
		if t, ok := strings.CutPrefix(v, "Bearer "); ok {
			tok = strings.TrimSpace(t)
		}
	}
	if tok == "" {
		s.opts.Metrics.refused.WithLabelValues(refusedAuth).Inc()
		return status.Error(codes.Unauthenticated, "a bearer token is required (authorization: Bearer <token>)")
	}
	if err := s.opts.Tokens.Authorize(tok, httpin.ScopePush); err != nil {
		s.opts.Metrics.refused.WithLabelValues(refusedAuth).Inc()
		if errors.Is(err, httpin.ErrScope) {
			return status.Error(codes.PermissionDenied, "the bearer token may not push records (scope push)")
		}
		return status.Error(codes.Unauthenticated, "the bearer token is not valid")
	}
	return nil
}

func (s *Source) authUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := s.authorize(ctx); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

func (s *Source) authStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if err := s.authorize(ss.Context()); err != nil {
		return err
	}
	return h(srv, ss)
}
