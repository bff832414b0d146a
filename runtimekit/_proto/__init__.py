"""Generated protobuf / gRPC modules (scripts/gen-protos). Do not edit."""
