mod store;
mod transfer;
