//! `version()`: quiverdb's name and version, then the DataFusion it runs on
//! (DataFusion's own `version()` names only DataFusion).

use std::sync::Arc;

use arrow_schema::DataType;
use datafusion::common::{Result, ScalarValue};
use datafusion::execution::{FunctionRegistry, SessionState};
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility};

/// What `version()` returns.
pub fn version_string() -> String {
    format!(
        "quiverdb {} (Apache DataFusion {}, {} on {})",
        env!("CARGO_PKG_VERSION"),
        datafusion::DATAFUSION_VERSION,
        std::env::consts::ARCH,
        std::env::consts::OS
    )
}

/// Registers quiverdb's `version()` in place of DataFusion's.
pub(crate) fn register(state: &mut SessionState) {
    let version = ScalarUDF::new_from_impl(Version { signature: Signature::nullary(Volatility::Immutable) });
    if let Err(e) = state.register_udf(Arc::new(version)) {
        tracing::warn!("version() stays DataFusion's: {e}");
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Version {
    signature: Signature,
}

impl ScalarUDFImpl for Version {
    fn name(&self) -> &str {
        "version"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(version_string()))))
    }
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn version_names_quiverdb_then_datafusion() {
        let ctx = crate::session_context(&quiverdb_storage::Database::new());
        let batches = ctx.sql("SELECT version()").await.unwrap().collect().await.unwrap();
        let column = batches[0].column(0);
        let text = arrow_array::cast::AsArray::as_string::<i32>(column.as_ref()).value(0);
        assert!(text.starts_with(&format!("quiverdb {} (Apache DataFusion 55.", env!("CARGO_PKG_VERSION"))), "{text}");
    }
}
