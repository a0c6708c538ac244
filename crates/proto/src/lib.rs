//! webpep's messages between the client proxy and the edge (see docs/protocol.md).
