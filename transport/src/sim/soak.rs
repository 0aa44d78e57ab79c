//! soak (placeholder)
