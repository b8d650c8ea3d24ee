//! The Flight service tonic serves: arrow-flight's Flight SQL dispatch
//! over [`QuiverFlightSql`], with two corrections. arrow-flight reports a
//! command whose type it knows but whose bytes do not decode as an
//! `Internal` error; it is the client's mistake, so quiverdb reports it as
//! `InvalidArgument`. And arrow-flight answers no GetSchema; quiverdb
//! answers it for queries, prepared statements and metadata commands.
//!
//! Every request runs in the session its cookie names (see
//! [`super::sessions`]); a response that opened or closed a session sets
//! or clears the cookie. Flight's session actions (`SetSessionOptions`,
//! `GetSessionOptions`, `CloseSession`) are answered here.

use arrow_flight::flight_service_server::FlightService;
use arrow_flight::{
    Action, Criteria, Empty, FlightData, FlightDescriptor, FlightInfo, HandshakeRequest, PollInfo, SchemaResult, Ticket,
};
use bytes::Bytes;
use futures::{StreamExt, stream};
use prost::Message;
use tonic::{Code, Request, Response, Status, Streaming};

use super::service::QuiverFlightSql;
use super::sessions::proto::{
    CLOSE_SESSION, CloseSessionResult, CloseStatus, GET_SESSION_OPTIONS, SET_SESSION_OPTIONS, SetSessionOptionsRequest,
};

/// See the module documentation.
#[derive(Debug, Clone)]
pub(crate) struct QuiverFlightService(pub(crate) QuiverFlightSql);

/// `status`, with arrow-flight's report of an undecodable command turned
/// into `InvalidArgument`.
fn malformed(status: Status) -> Status {
    if status.code() == Code::Internal && status.message().starts_with("ParseError(\"Unable to decode Any value") {
        Status::invalid_argument(format!("malformed Flight SQL command: {}", status.message()))
    } else {
        status
    }
}

/// An action's body: the message itself, or (as some clients send it)
/// packed in an `Any`.
fn action_body<M: Message + Default>(body: &[u8], name: &str) -> Result<M, Status> {
    let malformed = |e: prost::DecodeError| Status::invalid_argument(format!("malformed {name}: {e}"));
    if let Ok(any) = arrow_flight::sql::Any::decode(body)
        && any.type_url.ends_with(&format!("arrow.flight.protocol.{name}"))
    {
        return M::decode(&*any.value).map_err(malformed);
    }
    M::decode(body).map_err(malformed)
}

/// `response`, with the cookie of a session the request opened or closed,
/// and arrow-flight's decoding errors corrected.
fn answered<T>(service: &QuiverFlightSql, response: Result<Response<T>, Status>) -> Result<Response<T>, Status> {
    let mut response = response.map_err(malformed)?;
    service.session().answer(response.metadata_mut());
    Ok(response)
}

#[tonic::async_trait]
impl FlightService for QuiverFlightService {
    type HandshakeStream = <QuiverFlightSql as FlightService>::HandshakeStream;
    type ListFlightsStream = <QuiverFlightSql as FlightService>::ListFlightsStream;
    type DoGetStream = <QuiverFlightSql as FlightService>::DoGetStream;
    type DoPutStream = <QuiverFlightSql as FlightService>::DoPutStream;
    type DoActionStream = <QuiverFlightSql as FlightService>::DoActionStream;
    type ListActionsStream = <QuiverFlightSql as FlightService>::ListActionsStream;
    type DoExchangeStream = <QuiverFlightSql as FlightService>::DoExchangeStream;

    async fn handshake(
        &self,
        request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<Response<Self::HandshakeStream>, Status> {
        self.0.handshake(request).await.map_err(malformed)
    }

    async fn list_flights(&self, request: Request<Criteria>) -> Result<Response<Self::ListFlightsStream>, Status> {
        self.0.list_flights(request).await.map_err(malformed)
    }

    async fn get_flight_info(&self, request: Request<FlightDescriptor>) -> Result<Response<FlightInfo>, Status> {
        let service = self.0.for_request(&request)?;
        answered(&service, service.get_flight_info(request).await)
    }

    async fn poll_flight_info(&self, request: Request<FlightDescriptor>) -> Result<Response<PollInfo>, Status> {
        let service = self.0.for_request(&request)?;
        answered(&service, service.poll_flight_info(request).await)
    }

    async fn get_schema(&self, request: Request<FlightDescriptor>) -> Result<Response<SchemaResult>, Status> {
        let service = self.0.for_request(&request)?;
        answered(&service, service.schema_of(request).await.map(Response::new))
    }

    async fn do_get(&self, request: Request<Ticket>) -> Result<Response<Self::DoGetStream>, Status> {
        let service = self.0.for_request(&request)?;
        answered(&service, service.do_get(request).await)
    }

    /// The put runs inside the response stream, not before the response
    /// is returned: a client that cancels mid-stream resets the HTTP/2
    /// stream, which hyper reports to the request body as a clean end
    /// (`CANCEL` is no error to it) but also to the response side, which
    /// then drops the response stream (and the ingest with it, uncommitted)
    /// before polling it again. Run before the response, the put would
    /// take the cancel for the end of its input and commit.
    async fn do_put(&self, request: Request<Streaming<FlightData>>) -> Result<Response<Self::DoPutStream>, Status> {
        let service = self.0.for_request(&request)?;
        let runs = service.clone();
        let put = async move {
            match runs.do_put(request).await {
                Ok(response) => response.into_inner(),
                Err(status) => Box::pin(stream::iter([Err(malformed(status))])) as Self::DoPutStream,
            }
        };
        let results: Self::DoPutStream = Box::pin(stream::once(put).flatten());
        answered(&service, Ok(Response::new(results)))
    }

    async fn do_action(&self, request: Request<Action>) -> Result<Response<Self::DoActionStream>, Status> {
        let service = self.0.for_request(&request)?;
        let action = request.get_ref();
        let body = match action.r#type.as_str() {
            SET_SESSION_OPTIONS => {
                let options: SetSessionOptionsRequest = action_body(&action.body, "SetSessionOptionsRequest")?;
                service.set_session_options(options.session_options).await.encode_to_vec()
            }
            GET_SESSION_OPTIONS => service.session_options().encode_to_vec(),
            CLOSE_SESSION => {
                let status = if service.close_session() { CloseStatus::Closed } else { CloseStatus::NotClosable };
                CloseSessionResult { status: status as i32 }.encode_to_vec()
            }
            _ => return answered(&service, service.do_action(request).await),
        };
        let result = arrow_flight::Result { body: Bytes::from(body) };
        let response: Response<Self::DoActionStream> = Response::new(Box::pin(stream::iter([Ok(result)])));
        answered(&service, Ok(response))
    }

    async fn list_actions(&self, request: Request<Empty>) -> Result<Response<Self::ListActionsStream>, Status> {
        self.0.list_actions(request).await.map_err(malformed)
    }

    async fn do_exchange(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoExchangeStream>, Status> {
        self.0.do_exchange(request).await.map_err(malformed)
    }
}
