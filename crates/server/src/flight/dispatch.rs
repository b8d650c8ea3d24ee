//! The Flight service tonic serves: arrow-flight's Flight SQL dispatch
//! over [`QuiverFlightSql`], with two corrections. arrow-flight reports a
//! command whose type it knows but whose bytes do not decode as an
//! `Internal` error; it is the client's mistake, so quiverdb reports it as
//! `InvalidArgument`. And arrow-flight answers no GetSchema; quiverdb
//! answers it for queries, prepared statements and metadata commands.

use arrow_flight::flight_service_server::FlightService;
use arrow_flight::{
    Action, Criteria, Empty, FlightData, FlightDescriptor, FlightInfo, HandshakeRequest, PollInfo, SchemaResult, Ticket,
};
use tonic::{Code, Request, Response, Status, Streaming};

use super::service::QuiverFlightSql;

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
        self.0.get_flight_info(request).await.map_err(malformed)
    }

    async fn poll_flight_info(&self, request: Request<FlightDescriptor>) -> Result<Response<PollInfo>, Status> {
        self.0.poll_flight_info(request).await.map_err(malformed)
    }

    async fn get_schema(&self, request: Request<FlightDescriptor>) -> Result<Response<SchemaResult>, Status> {
        self.0.schema_of(request).await.map(Response::new)
    }

    async fn do_get(&self, request: Request<Ticket>) -> Result<Response<Self::DoGetStream>, Status> {
        self.0.do_get(request).await.map_err(malformed)
    }

    async fn do_put(&self, request: Request<Streaming<FlightData>>) -> Result<Response<Self::DoPutStream>, Status> {
        self.0.do_put(request).await.map_err(malformed)
    }

    async fn do_action(&self, request: Request<Action>) -> Result<Response<Self::DoActionStream>, Status> {
        self.0.do_action(request).await.map_err(malformed)
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
