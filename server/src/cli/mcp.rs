//! `hunkgate mcp`: a Model Context Protocol server over stdio, for agents that bring their own
//! loop (Claude Code, opencode, Codex, …) and talk to tools rather than run `hunkgate publish`.
//!
//! The protocol is the official Rust SDK's (`rmcp`): the handshake, version negotiation,
//! `ping`, cancellation, unknown methods. This module adds what is hunkgate's own: four tools
//! over the agent API (`/agent/*`, with the run's `HUNKGATE_AGENT_TOKEN`) in `tools`, and in
//! `stdio` a newline-delimited stdio transport that bounds each line and answers input rmcp
//! would drop silently (not JSON, too long) with a JSON-RPC error. Nothing but protocol messages
//! is ever written to stdout (logs go to stderr).

use std::borrow::Cow;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CustomRequest, CustomResult, ErrorCode,
    Implementation, ListToolsResult, PaginatedRequestParams, ProtocolVersion, ServerCapabilities,
    ServerConfig, Tool,
};
use rmcp::service::{RequestContext, ServerInitializeError};
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};

use crate::cli::client::{ClientError, HubClient, TOKEN_VAR, URL_VAR};

mod stdio;
mod tools;

pub use stdio::MAX_MESSAGE;

/// The newest protocol revision this server speaks; it speaks every one rmcp knows up to it
/// (2024-11-05, 2025-03-26, 2025-06-18, 2025-11-25). Not 2026-07-28: that revision drops the
/// `initialize` handshake for per-request metadata, which no client of ours speaks yet.
pub const NEWEST_PROTOCOL: ProtocolVersion = ProtocolVersion::V_2025_11_25;

/// Revisions from which a tool's argument errors are tool results (SEP-1303), not JSON-RPC
/// errors.
const ARGUMENT_ERRORS_AS_RESULTS: ProtocolVersion = ProtocolVersion::V_2025_11_25;

const INSTRUCTIONS: &str =
    "hunkgate shows your changes to a reviewer, who accepts or rejects them \
hunk by hunk before they reach the user's checkout. Before you start, call get_feedback: rejected \
hunks and the reviewer's comments on earlier suggestions of this session say what to avoid. When \
your change is ready, call publish_suggestion with a description (and hunk_descriptions saying why \
each change was made); suggestion_status then shows how the review is going.";

#[derive(Debug, thiserror::Error)]
pub enum McpError {
    #[error("reading standard input")]
    Read(#[source] std::io::Error),
    #[error("writing standard output")]
    Write(#[source] std::io::Error),
    #[error("starting the {0} thread")]
    Thread(&'static str, #[source] std::io::Error),
    #[error("the {0} panicked")]
    Panicked(&'static str),
    #[error("the MCP handshake failed")]
    Handshake(#[source] Box<ServerInitializeError>),
}

/// `hunkgate mcp`: serve stdin/stdout until stdin closes.
pub async fn run_stdio() -> Result<(), McpError> {
    serve(
        Server::new(hub_from_env().await),
        std::io::BufReader::new(std::io::stdin()),
        std::io::stdout(),
    )
    .await
}

/// The hub the tools call: the one the run's environment names. Run by hand with an agent
/// token but no `HUNKGATE_URL`, the hub of the repository around the current directory, found
/// as the reviewer's commands find it (its discovery record, checked against its `/health`) —
/// never a guessed port. Without the token there is nothing to find a hub for: only an agent
/// token opens `/agent/*`.
pub async fn hub_from_env() -> Result<HubClient, ClientError> {
    match HubClient::for_agent() {
        Err(ClientError::MissingEnv { missing }) if missing == [URL_VAR] => {
            let token = std::env::var(TOKEN_VAR).unwrap_or_default();
            match crate::cli::locate::hub_url_here().await {
                Ok(url) => HubClient::new(&url, token),
                Err(e) => Err(ClientError::NoHub(format!(
                    "{URL_VAR} is not set, and {e:#}"
                ))),
            }
        }
        other => other,
    }
}

/// Serve `server` over newline-delimited JSON-RPC from `input` to `output` until `input` ends
/// (then the calls in flight get a few seconds to answer) or nobody reads `output` any more.
pub async fn serve<I, O>(server: Server, input: I, output: O) -> Result<(), McpError>
where
    I: std::io::BufRead + Send + 'static,
    O: std::io::Write + Send + 'static,
{
    let (transport, ends) = stdio::LineTransport::start(input, output)?;
    match server.serve(transport).await {
        Ok(running) => {
            running
                .waiting()
                .await
                .map_err(|_| McpError::Panicked("MCP service"))?;
        }
        // Input ended (or output closed) before the client initialized: nothing to serve.
        Err(ServerInitializeError::ConnectionClosed(_)) => {}
        Err(e) => {
            ends.finish().await?;
            return Err(McpError::Handshake(Box::new(e)));
        }
    }
    ends.finish().await
}

/// The tools and the hub they call. Without `HUNKGATE_URL`/`HUNKGATE_AGENT_TOKEN` it still
/// initializes and lists its tools (clients list them at startup, wherever they run); only a call
/// fails, saying why.
pub struct Server {
    hub: Result<HubClient, ClientError>,
    tools: Vec<Tool>,
}

impl Server {
    pub fn new(hub: Result<HubClient, ClientError>) -> Self {
        Self {
            hub,
            tools: tools::tools(),
        }
    }
}

impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_protocol_version(NEWEST_PROTOCOL)
            .with_server_info(Implementation::new("hunkgate", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(&NEWEST_PROTOCOL))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools.clone()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tools.iter().find(|t| t.name == name).cloned()
    }

    /// Any method rmcp has no handler for: the old text, naming what this server answers.
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        Err(ErrorData::new(
            ErrorCode::METHOD_NOT_FOUND,
            format!(
                "unknown method {:?}: this server answers {}",
                request.method,
                stdio::ANSWERED.join(", ")
            ),
            None,
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.unwrap_or_default();
        let call = match tools::parse_args(&request.name, args) {
            Ok(call) => call,
            Err(tools::BadCall::Arguments(msg))
                if context
                    .protocol_version()
                    .is_some_and(|v| v.as_str() >= ARGUMENT_ERRORS_AS_RESULTS.as_str()) =>
            {
                return Ok(tools::tool_error(&msg).into());
            }
            Err(bad) => return Err(ErrorData::invalid_params(bad.message().to_string(), None)),
        };
        // A cancelled request gets no answer (rmcp drops it); stop asking the hub.
        tokio::select! {
            result = tools::call(&self.hub, call) => Ok(result.into()),
            () = context.ct.cancelled() => Err(ErrorData::internal_error("cancelled", None)),
        }
    }
}

#[cfg(test)]
mod tests;
