-- The tables of Arvados 3.2.1 that containers and their requests reference and that this
-- collection reads: users, api_client_authorizations, jobs (still in the schema though 3.0
-- removed its API and model), logs, containers and container_requests, as
-- services/api/db/structure.sql at the tag 3.2.1 defines them (last migration
-- 20251006181234): every column, type, default and NOT NULL of those tables, their id
-- sequences and primary keys, in the dump's order. Ids are bigint; api_client_id has
-- DEFAULT 0 (3.0.0). Tables they name that nothing here reads (groups, collections,
-- api_clients, ...) are left out. Secondary indexes live in indexes.sql; they need the
-- pg_trgm extension (schema_database() creates it as superuser when indexes.sql uses it).
-- Arvados' own test fixtures at 3.2.1 (tests/integration/arvados_fixture_loader.py) are
-- loaded into this schema.

SET client_min_messages = warning;

CREATE TABLE public.users (
    id bigint NOT NULL,
    uuid character varying(255),
    owner_uuid character varying(255) NOT NULL,
    created_at timestamp without time zone NOT NULL,
    modified_by_client_uuid character varying(255),
    modified_by_user_uuid character varying(255),
    modified_at timestamp without time zone,
    email character varying(255),
    first_name character varying(255),
    last_name character varying(255),
    identity_url character varying(255),
    is_admin boolean,
    prefs text,
    updated_at timestamp without time zone NOT NULL,
    default_owner_uuid character varying(255),
    is_active boolean DEFAULT false,
    username character varying(255),
    redirect_to_user_uuid character varying
);

CREATE SEQUENCE public.users_id_seq
    START WITH 1 INCREMENT BY 1 NO MINVALUE NO MAXVALUE CACHE 1;
ALTER SEQUENCE public.users_id_seq OWNED BY public.users.id;
ALTER TABLE ONLY public.users
    ALTER COLUMN id SET DEFAULT nextval('public.users_id_seq'::regclass);
ALTER TABLE ONLY public.users ADD CONSTRAINT users_pkey PRIMARY KEY (id);

CREATE TABLE public.api_client_authorizations (
    id bigint NOT NULL,
    api_token character varying(255) NOT NULL,
    api_client_id bigint DEFAULT 0 NOT NULL,
    user_id bigint NOT NULL,
    created_by_ip_address character varying(255),
    last_used_by_ip_address character varying(255),
    last_used_at timestamp without time zone,
    expires_at timestamp without time zone,
    created_at timestamp without time zone NOT NULL,
    updated_at timestamp without time zone NOT NULL,
    default_owner_uuid character varying(255),
    scopes text DEFAULT '["all"]'::text,
    uuid character varying(255) NOT NULL,
    refreshes_at timestamp without time zone
);

CREATE SEQUENCE public.api_client_authorizations_id_seq
    START WITH 1 INCREMENT BY 1 NO MINVALUE NO MAXVALUE CACHE 1;
ALTER SEQUENCE public.api_client_authorizations_id_seq OWNED BY public.api_client_authorizations.id;
ALTER TABLE ONLY public.api_client_authorizations
    ALTER COLUMN id SET DEFAULT nextval('public.api_client_authorizations_id_seq'::regclass);
ALTER TABLE ONLY public.api_client_authorizations ADD CONSTRAINT api_client_authorizations_pkey PRIMARY KEY (id);

CREATE TABLE public.jobs (
    id bigint NOT NULL,
    uuid character varying(255),
    owner_uuid character varying(255),
    modified_by_client_uuid character varying(255),
    modified_by_user_uuid character varying(255),
    modified_at timestamp without time zone,
    submit_id character varying(255),
    script character varying(255),
    script_version character varying(255),
    script_parameters text,
    cancelled_by_client_uuid character varying(255),
    cancelled_by_user_uuid character varying(255),
    cancelled_at timestamp without time zone,
    started_at timestamp without time zone,
    finished_at timestamp without time zone,
    running boolean,
    success boolean,
    output character varying(255),
    created_at timestamp without time zone NOT NULL,
    updated_at timestamp without time zone NOT NULL,
    is_locked_by_uuid character varying(255),
    log character varying(255),
    tasks_summary text,
    runtime_constraints text,
    nondeterministic boolean,
    repository character varying(255),
    supplied_script_version character varying(255),
    docker_image_locator character varying(255),
    priority integer DEFAULT 0 NOT NULL,
    description character varying(524288),
    state character varying(255),
    arvados_sdk_version character varying(255),
    components text,
    script_parameters_digest character varying(255)
);

CREATE SEQUENCE public.jobs_id_seq
    START WITH 1 INCREMENT BY 1 NO MINVALUE NO MAXVALUE CACHE 1;
ALTER SEQUENCE public.jobs_id_seq OWNED BY public.jobs.id;
ALTER TABLE ONLY public.jobs
    ALTER COLUMN id SET DEFAULT nextval('public.jobs_id_seq'::regclass);
ALTER TABLE ONLY public.jobs ADD CONSTRAINT jobs_pkey PRIMARY KEY (id);

CREATE TABLE public.logs (
    id bigint NOT NULL,
    uuid character varying(255),
    owner_uuid character varying(255),
    modified_by_client_uuid character varying(255),
    modified_by_user_uuid character varying(255),
    object_uuid character varying(255),
    event_at timestamp without time zone,
    event_type character varying(255),
    summary text,
    properties text,
    created_at timestamp without time zone NOT NULL,
    updated_at timestamp without time zone NOT NULL,
    modified_at timestamp without time zone,
    object_owner_uuid character varying(255)
);

CREATE SEQUENCE public.logs_id_seq
    START WITH 1 INCREMENT BY 1 NO MINVALUE NO MAXVALUE CACHE 1;
ALTER SEQUENCE public.logs_id_seq OWNED BY public.logs.id;
ALTER TABLE ONLY public.logs
    ALTER COLUMN id SET DEFAULT nextval('public.logs_id_seq'::regclass);
ALTER TABLE ONLY public.logs ADD CONSTRAINT logs_pkey PRIMARY KEY (id);

CREATE TABLE public.containers (
    id bigint NOT NULL,
    uuid character varying(255),
    owner_uuid character varying(255),
    created_at timestamp without time zone NOT NULL,
    modified_at timestamp without time zone,
    modified_by_client_uuid character varying(255),
    modified_by_user_uuid character varying(255),
    state character varying(255),
    started_at timestamp without time zone,
    finished_at timestamp without time zone,
    log character varying(255),
    environment text,
    cwd character varying(255),
    command text,
    output_path character varying(255),
    mounts text,
    runtime_constraints text,
    output character varying(255),
    container_image character varying(255),
    progress double precision,
    priority bigint,
    updated_at timestamp without time zone NOT NULL,
    exit_code integer,
    auth_uuid character varying(255),
    locked_by_uuid character varying(255),
    scheduling_parameters text,
    secret_mounts jsonb DEFAULT '{}'::jsonb,
    secret_mounts_md5 character varying DEFAULT '99914b932bd37a50b983c5e7c90ae93b'::character varying,
    runtime_status jsonb DEFAULT '{}'::jsonb,
    runtime_user_uuid text,
    runtime_auth_scopes jsonb,
    runtime_token text,
    lock_count integer DEFAULT 0 NOT NULL,
    gateway_address character varying,
    interactive_session_started boolean DEFAULT false NOT NULL,
    output_storage_classes jsonb DEFAULT '["default"]'::jsonb,
    output_properties jsonb DEFAULT '{}'::jsonb,
    cost double precision DEFAULT 0.0 NOT NULL,
    subrequests_cost double precision DEFAULT 0.0 NOT NULL,
    output_glob text DEFAULT '[]'::text,
    service boolean DEFAULT false NOT NULL,
    published_ports jsonb DEFAULT '{}'::jsonb
);

CREATE SEQUENCE public.containers_id_seq
    START WITH 1 INCREMENT BY 1 NO MINVALUE NO MAXVALUE CACHE 1;
ALTER SEQUENCE public.containers_id_seq OWNED BY public.containers.id;
ALTER TABLE ONLY public.containers
    ALTER COLUMN id SET DEFAULT nextval('public.containers_id_seq'::regclass);
ALTER TABLE ONLY public.containers ADD CONSTRAINT containers_pkey PRIMARY KEY (id);

CREATE TABLE public.container_requests (
    id bigint NOT NULL,
    uuid character varying(255),
    owner_uuid character varying(255),
    created_at timestamp without time zone NOT NULL,
    modified_at timestamp without time zone,
    modified_by_client_uuid character varying(255),
    modified_by_user_uuid character varying(255),
    name character varying(255),
    description text,
    properties jsonb,
    state character varying(255),
    requesting_container_uuid character varying(255),
    container_uuid character varying(255),
    container_count_max integer,
    mounts text,
    runtime_constraints text,
    container_image character varying(255),
    environment text,
    cwd character varying(255),
    command text,
    output_path character varying(255),
    priority integer,
    expires_at timestamp without time zone,
    filters text,
    updated_at timestamp without time zone NOT NULL,
    container_count integer DEFAULT 0,
    use_existing boolean DEFAULT true,
    scheduling_parameters text,
    output_uuid character varying(255),
    log_uuid character varying(255),
    output_name character varying(255) DEFAULT NULL::character varying,
    output_ttl integer DEFAULT 0 NOT NULL,
    secret_mounts jsonb DEFAULT '{}'::jsonb,
    runtime_token text,
    output_storage_classes jsonb DEFAULT '["default"]'::jsonb,
    output_properties jsonb DEFAULT '{}'::jsonb,
    cumulative_cost double precision DEFAULT 0.0 NOT NULL,
    output_glob text DEFAULT '[]'::text,
    service boolean DEFAULT false NOT NULL,
    published_ports jsonb DEFAULT '{}'::jsonb
);

CREATE SEQUENCE public.container_requests_id_seq
    START WITH 1 INCREMENT BY 1 NO MINVALUE NO MAXVALUE CACHE 1;
ALTER SEQUENCE public.container_requests_id_seq OWNED BY public.container_requests.id;
ALTER TABLE ONLY public.container_requests
    ALTER COLUMN id SET DEFAULT nextval('public.container_requests_id_seq'::regclass);
ALTER TABLE ONLY public.container_requests ADD CONSTRAINT container_requests_pkey PRIMARY KEY (id);
