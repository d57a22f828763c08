//! Report 5.2: standby, caches and promotion.
