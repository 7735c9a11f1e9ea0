mod documents;
mod media;
mod sessions;
mod support;
