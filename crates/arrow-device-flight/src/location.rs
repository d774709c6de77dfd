//! Flight locations: `grpc://`, `grpc+tcp://` and `grpc+tls://` URIs, as
//! the Flight protocol names them (`Location.uri`), and the client options
//! that go with them.

use std::time::Duration;

use tonic::transport::{Certificate, ClientTlsConfig, Endpoint};

use crate::error::{Error, Result};

/// A parsed location: where to connect (or bind), and whether with TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// As the user wrote it (for messages).
    pub(crate) text: String,
    /// `host:port`.
    pub(crate) authority: String,
    /// The host alone (TLS checks the certificate against it).
    pub(crate) host: String,
    pub(crate) tls: bool,
}

impl Location {
    /// Parses `grpc://HOST:PORT`, `grpc+tcp://HOST:PORT` or
    /// `grpc+tls://HOST:PORT`; the error says what is wrong.
    pub fn parse(text: &str) -> Result<Location> {
        let bad = |message: &str| Error::Location {
            location: text.to_string(),
            message: message.to_string(),
        };
        let (scheme, rest) = text.split_once("://").ok_or_else(|| {
            bad("expected grpc://HOST:PORT, grpc+tcp://HOST:PORT or grpc+tls://HOST:PORT")
        })?;
        let tls = match scheme {
            "grpc" | "grpc+tcp" => false,
            "grpc+tls" => true,
            other => {
                return Err(bad(&format!(
                    "the scheme {other:?} is not one of grpc, grpc+tcp, grpc+tls \
                     (Unix sockets and other transports are not supported)"
                )))
            }
        };
        let authority = rest.trim_end_matches('/');
        if authority.is_empty() || authority.contains('/') {
            return Err(bad("expected HOST:PORT after the scheme, and no path"));
        }
        let (host, port) = authority
            .rsplit_once(':')
            .ok_or_else(|| bad("the port is missing (HOST:PORT)"))?;
        if port.parse::<u16>().is_err() {
            return Err(bad(&format!(
                "the port {port:?} is not a number from 0 to 65535"
            )));
        }
        if host.is_empty() {
            return Err(bad("the host is empty"));
        }
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        Ok(Location {
            text: text.to_string(),
            authority: authority.to_string(),
            host,
            tls,
        })
    }

    /// `HOST:PORT`, as a server binds it.
    pub fn authority(&self) -> &str {
        &self.authority
    }

    /// Whether the location asks for TLS (`grpc+tls://`).
    pub fn is_tls(&self) -> bool {
        self.tls
    }

    /// The endpoint tonic connects to, with TLS configured when the
    /// location asks for it.
    pub(crate) fn endpoint(
        &self,
        tls_root: Option<&[u8]>,
        connect_timeout: Duration,
    ) -> Result<Endpoint> {
        let scheme = if self.tls { "https" } else { "http" };
        let uri = format!("{scheme}://{}", self.authority);
        let endpoint = Endpoint::from_shared(uri).map_err(|e| Error::Location {
            location: self.text.clone(),
            message: e.to_string(),
        })?;
        let endpoint = endpoint
            .connect_timeout(connect_timeout)
            .tcp_nodelay(true)
            // Large batches: a bigger window than HTTP/2's 64 KiB default
            // keeps a loopback or LAN link busy; the prefetch bound, not the
            // window, bounds memory.
            .initial_stream_window_size(Some(4 << 20))
            .initial_connection_window_size(Some(8 << 20));
        if !self.tls {
            if tls_root.is_some() {
                return Err(Error::Location {
                    location: self.text.clone(),
                    message: "a TLS root certificate was given for a location without TLS; \
                              use grpc+tls://"
                        .into(),
                });
            }
            return Ok(endpoint);
        }
        let mut config = ClientTlsConfig::new().domain_name(self.host.clone());
        config = match tls_root {
            Some(pem) => config.ca_certificate(Certificate::from_pem(pem)),
            None => config.with_enabled_roots(),
        };
        endpoint.tls_config(config).map_err(|e| Error::Location {
            location: self.text.clone(),
            message: format!("TLS configuration: {}", crate::error::chain(&e)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_three_schemes() {
        let l = Location::parse("grpc://127.0.0.1:8815").unwrap();
        assert_eq!(
            (l.authority.as_str(), l.host.as_str(), l.tls),
            ("127.0.0.1:8815", "127.0.0.1", false)
        );
        assert!(!Location::parse("grpc+tcp://h:1").unwrap().tls);
        let l = Location::parse("grpc+tls://localhost:443/").unwrap();
        assert_eq!((l.authority.as_str(), l.tls), ("localhost:443", true));
        let l = Location::parse("grpc://[::1]:9").unwrap();
        assert_eq!(l.host, "::1");
    }

    #[test]
    fn refuses_what_it_cannot_reach_with_the_reason() {
        let cases = [
            ("localhost:1", "expected grpc://HOST:PORT"),
            ("http://h:1", "the scheme \"http\" is not one of"),
            ("grpc+unix:///tmp/s", "the scheme \"grpc+unix\""),
            ("grpc://h", "the port is missing"),
            ("grpc://h:99999", "is not a number from 0 to 65535"),
            ("grpc://:1", "the host is empty"),
            ("grpc://h:1/path", "no path"),
        ];
        for (text, expected) in cases {
            let e = Location::parse(text).unwrap_err().to_string();
            assert!(e.contains(expected), "{text}: {e}");
            assert!(e.starts_with(&format!("location {text:?}")), "{e}");
        }
    }

    #[test]
    fn a_root_certificate_without_tls_is_refused() {
        let l = Location::parse("grpc://h:1").unwrap();
        let e = l
            .endpoint(Some(b"pem"), Duration::from_secs(1))
            .unwrap_err();
        assert!(e.to_string().contains("use grpc+tls://"), "{e}");
    }
}
